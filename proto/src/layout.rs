//! Collector memory layouts: the byte-level contract between the translator's RDMA writes, the
//! collector's queries and the Tofino program.
//!
//! Byte orders follow the reference (§2.7, §7.2) where it has a store, and little-endian
//! wherever we add a field, because the collector reads memory on x86:
//!
//! | Store | Unit | Bytes |
//! |---|---|---|
//! | Key-Write | slot of 8/16/32/64 B | checksum (LE u32), then the value as reported, zero-padded |
//! | Key-Increment | 8 B counter | LE u64 (the software RNIC, like rxe, adds to a native u64) |
//! | Append, reference | ring of entries | entries back to back, batch × entry per write |
//! | Append, sequenced | ring of batch slots | batch × entry, then an 8 B LE trailer (seq, count) |
//! | Postcarding | chunk of 2^k ≥ 4·hops B | hop words (4 B each, encoded by [`crate::hash`]) |
//!
//! Every constructor validates its sizes, so offsets computed from in-range indices never
//! overflow; region lengths are capped at [`MAX_REGION_LEN`].

/// Largest region any layout may describe (1 TiB).
pub const MAX_REGION_LEN: u64 = 1 << 40;

/// Why a layout's parameters were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutError {
    /// A slot or chunk count is not a power of two in the supported range.
    NotPowerOfTwo,
    /// A per-entry size is not one the layout supports.
    BadEntrySize,
    /// A batch size is out of range, or the capacity is not a positive multiple of it.
    BadBatch,
    /// A hop count is outside 1..=16.
    BadHops,
    /// The region would exceed [`MAX_REGION_LEN`].
    TooLarge,
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            LayoutError::NotPowerOfTwo => "slot count must be a power of two in 2..=2^31",
            LayoutError::BadEntrySize => "unsupported entry size",
            LayoutError::BadBatch => {
                "batch must be 1..=16 and capacity a positive multiple of the batch"
            }
            LayoutError::BadHops => "hop count must be 1..=16",
            LayoutError::TooLarge => "region larger than 2^40 bytes",
        })
    }
}

impl std::error::Error for LayoutError {}

/// Checks a power-of-two slot count in 2..=2^31 (the range the hashers' masks cover).
fn check_slots(slots: u32) -> Result<(), LayoutError> {
    if slots >= 2 && slots.is_power_of_two() {
        Ok(())
    } else {
        Err(LayoutError::NotPowerOfTwo)
    }
}

/// `count × size`, rejected if it overflows or exceeds [`MAX_REGION_LEN`].
fn region(count: u64, size: u64) -> Result<u64, LayoutError> {
    count
        .checked_mul(size)
        .filter(|&len| len <= MAX_REGION_LEN)
        .ok_or(LayoutError::TooLarge)
}

/// A Key-Write store: `slots` slots of `slot_size` bytes, each a checksum and a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyWriteLayout {
    slots: u32,
    slot_size: u32,
}

impl KeyWriteLayout {
    /// Length of the checksum at the start of every slot.
    pub const CHECKSUM_LEN: usize = 4;

    /// A store of `slots` (power of two, 2..=2^31) slots of `slot_size` (8, 16, 32 or 64) bytes.
    pub fn new(slots: u32, slot_size: u32) -> Result<Self, LayoutError> {
        check_slots(slots)?;
        if !matches!(slot_size, 8 | 16 | 32 | 64) {
            return Err(LayoutError::BadEntrySize);
        }
        region(slots as u64, slot_size as u64)?;
        Ok(KeyWriteLayout { slots, slot_size })
    }

    /// Number of slots.
    #[inline]
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes per slot.
    #[inline]
    pub fn slot_size(&self) -> u32 {
        self.slot_size
    }

    /// Longest value a slot holds (`slot_size − 4`).
    #[inline]
    pub fn value_width(&self) -> usize {
        self.slot_size as usize - Self::CHECKSUM_LEN
    }

    /// Bytes of the whole region.
    #[inline]
    pub fn region_len(&self) -> u64 {
        self.slots as u64 * self.slot_size as u64
    }

    /// Byte offset of `slot` (taken modulo the slot count, as the hashers' masks already do).
    #[inline]
    pub fn slot_offset(&self, slot: u32) -> u64 {
        (slot & (self.slots - 1)) as u64 * self.slot_size as u64
    }

    /// Writes one slot's bytes (the RDMA WRITE payload) into `out[..slot_size]`: the checksum
    /// little-endian, then `value`, zero-padded to the slot.
    ///
    /// # Panics
    /// If `value` is longer than [`KeyWriteLayout::value_width`] or `out` shorter than the slot;
    /// callers check value lengths when they parse reports.
    #[inline]
    pub fn encode_slot(&self, checksum: u32, value: &[u8], out: &mut [u8]) {
        assert!(
            value.len() <= self.value_width(),
            "value wider than the slot"
        );
        let out = &mut out[..self.slot_size as usize];
        out[..Self::CHECKSUM_LEN].copy_from_slice(&checksum.to_le_bytes());
        let (v, pad) = out[Self::CHECKSUM_LEN..].split_at_mut(value.len());
        v.copy_from_slice(value);
        pad.fill(0);
    }

    /// [`KeyWriteLayout::encode_slot`] into a zero-filled 64-byte block, with fixed-size moves
    /// (the value's own zero-padded block lands after the checksum; what passes the slot is
    /// zero, since the value is no wider than the slot): the block
    /// `QpSender::write_replicas` takes.
    ///
    /// # Panics
    /// If `value` is longer than [`KeyWriteLayout::value_width`].
    #[inline]
    pub fn encode_slot_padded(&self, checksum: u32, value: &crate::Value, out: &mut [u8; 64]) {
        assert!(
            value.len() <= self.value_width(),
            "value wider than the slot"
        );
        out[..Self::CHECKSUM_LEN].copy_from_slice(&checksum.to_le_bytes());
        let v: &mut [u8; crate::MAX_VALUE_LEN] = (&mut out
            [Self::CHECKSUM_LEN..Self::CHECKSUM_LEN + crate::MAX_VALUE_LEN])
            .try_into()
            .expect("32 bytes");
        *v = *value.padded();
    }

    /// Splits one slot's bytes into its checksum and its value bytes (`value_width` long).
    ///
    /// # Panics
    /// If `bytes` is shorter than the slot.
    #[inline]
    pub fn decode_slot<'a>(&self, bytes: &'a [u8]) -> (u32, &'a [u8]) {
        let bytes = &bytes[..self.slot_size as usize];
        let (c, v) = bytes.split_at(Self::CHECKSUM_LEN);
        (u32::from_le_bytes([c[0], c[1], c[2], c[3]]), v)
    }
}

/// A Key-Increment store: `slots` little-endian u64 counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CounterLayout {
    slots: u32,
}

impl CounterLayout {
    /// Bytes per counter (also the 8-byte alignment RDMA atomics require).
    pub const COUNTER_LEN: u32 = 8;

    /// A store of `slots` (power of two, 2..=2^31) counters.
    pub fn new(slots: u32) -> Result<Self, LayoutError> {
        check_slots(slots)?;
        region(slots as u64, Self::COUNTER_LEN as u64)?;
        Ok(CounterLayout { slots })
    }

    /// Number of counters.
    #[inline]
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes of the whole region.
    #[inline]
    pub fn region_len(&self) -> u64 {
        self.slots as u64 * Self::COUNTER_LEN as u64
    }

    /// Byte offset of counter `slot` (taken modulo the slot count).
    #[inline]
    pub fn slot_offset(&self, slot: u32) -> u64 {
        (slot & (self.slots - 1)) as u64 * Self::COUNTER_LEN as u64
    }

    /// The counter held in `bytes[..8]`.
    ///
    /// # Panics
    /// If `bytes` is shorter than 8.
    #[inline]
    pub fn decode(&self, bytes: &[u8]) -> u64 {
        let b: [u8; 8] = bytes[..8].try_into().expect("eight bytes");
        u64::from_le_bytes(b)
    }

    /// The memory bytes of counter value `v`.
    #[inline]
    pub fn encode(&self, v: u64) -> [u8; 8] {
        v.to_le_bytes()
    }
}

/// How an Append list is laid out in memory.
#[derive(
    serde::Deserialize, serde::Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum AppendFormat {
    /// The artefact's plain ring of entries; readers can only treat all-zero as empty.
    Reference,
    /// Batch slots that end in a sequence/count trailer, so readers see the writer's head.
    #[default]
    Sequenced,
}

/// What a reader learns from one sequenced batch slot's trailer (see [`AppendLayout::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchState {
    /// Batch `expected` has not been written yet (the slot is blank or holds an older lap).
    Pending,
    /// Batch `expected` is complete and holds this many valid entries (1..=batch).
    Ready(u16),
    /// The writer lapped the reader: the slot holds a batch this many laps ahead of `expected`.
    Overrun(u64),
    /// The trailer is not one a writer produces (wrong slot for its number, or a bad count).
    Corrupt,
}

/// An Append list: a ring of `capacity` entries of `entry_size` bytes, written `batch` at a time.
///
/// In the [`AppendFormat::Sequenced`] format the ring is `capacity / batch` *batch slots*. Batch
/// slot j sits at `j × stride`, `stride = batch × entry_size + 8`, and holds `batch` entries then
/// an 8-byte little-endian trailer, all written by one RDMA WRITE: the low 48 bits are the batch
/// sequence number s (1-based, per list, increasing; 0 = never written) and the high 16 bits the
/// number of valid entries (1..=batch; a batch flushed early leaves its unused entries zero).
/// Batch s lives in slot `(s − 1) mod batch_slots`. The trailer is the last thing written and
/// writers fill in address order, so a trailer equal to the expected s means complete entries,
/// and a larger one means the reader was lapped by `(s' − s) / batch_slots` laps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AppendLayout {
    format: AppendFormat,
    capacity: u32,
    entry_size: u32,
    batch: u32,
}

impl AppendLayout {
    /// Length of a sequenced batch trailer.
    pub const TRAILER_LEN: u32 = 8;
    /// Largest batch sequence number (48 bits).
    pub const MAX_SEQ: u64 = (1 << 48) - 1;

    /// A list of `capacity` entries (a positive multiple of `batch`) of `entry_size` (1..=32)
    /// bytes, written `batch` (1..=16) entries at a time.
    pub fn new(
        format: AppendFormat,
        capacity: u32,
        entry_size: u32,
        batch: u32,
    ) -> Result<Self, LayoutError> {
        if !(1..=32).contains(&entry_size) {
            return Err(LayoutError::BadEntrySize);
        }
        if !(1..=16).contains(&batch) || capacity == 0 || capacity % batch != 0 {
            return Err(LayoutError::BadBatch);
        }
        let l = AppendLayout {
            format,
            capacity,
            entry_size,
            batch,
        };
        region(l.batch_slots() as u64, l.stride() as u64)?;
        Ok(l)
    }

    /// The format.
    #[inline]
    pub fn format(&self) -> AppendFormat {
        self.format
    }

    /// Capacity in entries.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Bytes per entry.
    #[inline]
    pub fn entry_size(&self) -> u32 {
        self.entry_size
    }

    /// Entries per batch (per RDMA WRITE).
    #[inline]
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Number of batch slots in the ring (`capacity / batch`).
    #[inline]
    pub fn batch_slots(&self) -> u32 {
        self.capacity / self.batch
    }

    /// Bytes of one batch's entries.
    #[inline]
    pub fn entries_len(&self) -> u32 {
        self.batch * self.entry_size
    }

    /// Distance between batch slots, which is also the length of one batch's RDMA WRITE:
    /// entries plus the trailer (sequenced) or entries only (reference).
    #[inline]
    pub fn stride(&self) -> u32 {
        match self.format {
            AppendFormat::Reference => self.entries_len(),
            AppendFormat::Sequenced => self.entries_len() + Self::TRAILER_LEN,
        }
    }

    /// Bytes of the whole region.
    #[inline]
    pub fn region_len(&self) -> u64 {
        self.batch_slots() as u64 * self.stride() as u64
    }

    /// Byte offset of batch slot `j` (taken modulo the batch-slot count).
    #[inline]
    pub fn batch_offset(&self, j: u32) -> u64 {
        (j % self.batch_slots()) as u64 * self.stride() as u64
    }

    /// Byte offset of entry `i` (0-based, `< batch`) of batch slot `j`; in the reference format
    /// this is ring entry `j × batch + i`.
    #[inline]
    pub fn entry_offset(&self, j: u32, i: u32) -> u64 {
        debug_assert!(i < self.batch);
        self.batch_offset(j) + (i % self.batch) as u64 * self.entry_size as u64
    }

    /// Byte offset of batch slot `j`'s trailer; `None` in the reference format.
    #[inline]
    pub fn trailer_offset(&self, j: u32) -> Option<u64> {
        match self.format {
            AppendFormat::Reference => None,
            AppendFormat::Sequenced => Some(self.batch_offset(j) + self.entries_len() as u64),
        }
    }

    /// The batch slot that batch number `s` (1-based) is written to.
    #[inline]
    pub fn slot_for_seq(&self, s: u64) -> u32 {
        debug_assert!(s != 0, "batch numbers start at 1");
        (s.wrapping_sub(1) % self.batch_slots() as u64) as u32
    }

    /// The trailer bytes of batch `s` (1..=2^48−1) holding `count` (1..=batch) entries.
    ///
    /// # Panics
    /// If `s` or `count` is out of range.
    #[inline]
    pub fn encode_trailer(&self, s: u64, count: u16) -> [u8; 8] {
        assert!(
            (1..=Self::MAX_SEQ).contains(&s),
            "batch number out of range"
        );
        assert!(
            count >= 1 && count as u32 <= self.batch,
            "batch count out of range"
        );
        (s | (count as u64) << 48).to_le_bytes()
    }

    /// The (sequence number, count) a trailer holds; `None` if the slot was never written
    /// (all zero) or the trailer is malformed (zero sequence, or count not in 1..=batch).
    #[inline]
    pub fn decode_trailer(&self, t: [u8; 8]) -> Option<(u64, u16)> {
        let raw = u64::from_le_bytes(t);
        let (s, count) = (raw & Self::MAX_SEQ, (raw >> 48) as u16);
        (s != 0 && count >= 1 && count as u32 <= self.batch).then_some((s, count))
    }

    /// What the trailer `t`, read from the slot of batch `expected`, says about that batch.
    #[inline]
    pub fn check(&self, expected: u64, t: [u8; 8]) -> BatchState {
        if u64::from_le_bytes(t) == 0 {
            return BatchState::Pending;
        }
        let Some((s, count)) = self.decode_trailer(t) else {
            return BatchState::Corrupt;
        };
        if self.slot_for_seq(s) != self.slot_for_seq(expected) {
            return BatchState::Corrupt;
        }
        match s.cmp(&expected) {
            core::cmp::Ordering::Less => BatchState::Pending,
            core::cmp::Ordering::Equal => BatchState::Ready(count),
            core::cmp::Ordering::Greater => {
                BatchState::Overrun((s - expected) / self.batch_slots() as u64)
            }
        }
    }
}

/// A Postcarding store: `chunks` chunks of `hops` 4-byte hop words, padded to a power of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostcardLayout {
    chunks: u32,
    hops: u8,
}

impl PostcardLayout {
    /// Bytes per hop word.
    pub const HOP_LEN: u32 = 4;

    /// A store of `chunks` (power of two, 2..=2^31) chunks of `hops` (1..=16) hops.
    pub fn new(chunks: u32, hops: u8) -> Result<Self, LayoutError> {
        check_slots(chunks)?;
        if !(1..=crate::hash::MAX_HOPS).contains(&(hops as usize)) {
            return Err(LayoutError::BadHops);
        }
        let l = PostcardLayout { chunks, hops };
        region(chunks as u64, l.chunk_size() as u64)?;
        Ok(l)
    }

    /// Number of chunks.
    #[inline]
    pub fn chunks(&self) -> u32 {
        self.chunks
    }

    /// Hops per chunk.
    #[inline]
    pub fn hops(&self) -> u8 {
        self.hops
    }

    /// Bytes per chunk: the next power of two ≥ 4·hops (5 hops → 32 B, as in the reference),
    /// so the translator addresses chunks with a shift.
    #[inline]
    pub fn chunk_size(&self) -> u32 {
        (Self::HOP_LEN * self.hops as u32).next_power_of_two()
    }

    /// Bytes of the hop words of one chunk (the RDMA WRITE length; padding is never written).
    #[inline]
    pub fn words_len(&self) -> u32 {
        Self::HOP_LEN * self.hops as u32
    }

    /// Bytes of the whole region.
    #[inline]
    pub fn region_len(&self) -> u64 {
        self.chunks as u64 * self.chunk_size() as u64
    }

    /// Byte offset of chunk `c` (taken modulo the chunk count).
    #[inline]
    pub fn chunk_offset(&self, c: u32) -> u64 {
        (c & (self.chunks - 1)) as u64 * self.chunk_size() as u64
    }

    /// Byte offset of hop `hop` (0-based, `< hops`) of chunk `c`.
    #[inline]
    pub fn hop_offset(&self, c: u32, hop: usize) -> u64 {
        debug_assert!(hop < self.hops as usize);
        self.chunk_offset(c) + Self::HOP_LEN as u64 * (hop % self.hops as usize) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keywrite_reference_slot() {
        // The artefact: 8-byte slots, LE checksum then the data as sent (big-endian).
        let l = KeyWriteLayout::new(256, 8).unwrap();
        assert_eq!(
            (l.value_width(), l.region_len(), l.slot_offset(173)),
            (4, 2048, 1384)
        );
        let mut out = [0xAAu8; 8];
        l.encode_slot(0x99F8_B879, &0x1122_3344u32.to_be_bytes(), &mut out);
        assert_eq!(out, [0x79, 0xB8, 0xF8, 0x99, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(
            l.decode_slot(&out),
            (0x99F8_B879, &[0x11, 0x22, 0x33, 0x44][..])
        );
    }

    #[test]
    fn keywrite_pads_short_values() {
        let l = KeyWriteLayout::new(1 << 10, 32).unwrap();
        let mut out = [0xAAu8; 40];
        l.encode_slot(7, &[1, 2, 3], &mut out);
        assert_eq!(&out[..8], &[7, 0, 0, 0, 1, 2, 3, 0]);
        assert!(out[8..32].iter().all(|&b| b == 0));
        assert!(out[32..].iter().all(|&b| b == 0xAA));
        let (c, v) = l.decode_slot(&out);
        assert_eq!((c, v.len()), (7, 28));
    }

    #[test]
    fn keywrite_bounds() {
        assert_eq!(KeyWriteLayout::new(1, 8), Err(LayoutError::NotPowerOfTwo));
        assert_eq!(KeyWriteLayout::new(6, 8), Err(LayoutError::NotPowerOfTwo));
        assert_eq!(KeyWriteLayout::new(8, 12), Err(LayoutError::BadEntrySize));
        let big = KeyWriteLayout::new(1 << 31, 64).unwrap();
        assert_eq!(big.region_len(), 1 << 37);
        assert_eq!(big.slot_offset(u32::MAX), ((1u64 << 31) - 1) * 64);
    }

    #[test]
    fn counters_are_little_endian() {
        let l = CounterLayout::new(1 << 4).unwrap();
        assert_eq!(
            (l.region_len(), l.slot_offset(3), l.slot_offset(19)),
            (128, 24, 24)
        );
        assert_eq!(l.decode(&[1, 2, 0, 0, 0, 0, 0, 0, 9]), 0x0201);
        assert_eq!(l.encode(0x0201), [1, 2, 0, 0, 0, 0, 0, 0]);
        assert!(CounterLayout::new(0).is_err());
    }

    #[test]
    fn append_reference_ring() {
        let l = AppendLayout::new(AppendFormat::Reference, 1024, 4, 4).unwrap();
        assert_eq!(
            (l.batch_slots(), l.stride(), l.region_len()),
            (256, 16, 4096)
        );
        assert_eq!(l.entry_offset(3, 2), (3 * 4 + 2) * 4);
        assert_eq!(l.trailer_offset(3), None);
    }

    #[test]
    fn append_sequenced_ring() {
        let l = AppendLayout::new(AppendFormat::Sequenced, 12, 5, 3).unwrap();
        assert_eq!((l.batch_slots(), l.stride(), l.region_len()), (4, 23, 92));
        assert_eq!(l.batch_offset(2), 46);
        assert_eq!(l.entry_offset(2, 1), 51);
        assert_eq!(l.trailer_offset(2), Some(46 + 15));
        assert_eq!([1, 4, 5, 8, 9].map(|s| l.slot_for_seq(s)), [0, 3, 0, 3, 0]);
        let t = l.encode_trailer(0x1234_5678_9ABC, 2);
        assert_eq!(t, [0xBC, 0x9A, 0x78, 0x56, 0x34, 0x12, 2, 0]);
        assert_eq!(l.decode_trailer(t), Some((0x1234_5678_9ABC, 2)));
        assert_eq!(l.decode_trailer([0; 8]), None);
        assert_eq!(l.decode_trailer((4u64 << 48 | 1).to_le_bytes()), None);
        assert_eq!(l.decode_trailer((1u64 << 48).to_le_bytes()), None);
    }

    #[test]
    fn append_reader_states() {
        let l = AppendLayout::new(AppendFormat::Sequenced, 16, 4, 4).unwrap(); // 4 batch slots
        assert_eq!(l.check(6, [0; 8]), BatchState::Pending);
        assert_eq!(l.check(6, l.encode_trailer(2, 4)), BatchState::Pending);
        assert_eq!(l.check(6, l.encode_trailer(6, 3)), BatchState::Ready(3));
        assert_eq!(l.check(6, l.encode_trailer(10, 4)), BatchState::Overrun(1));
        assert_eq!(l.check(6, l.encode_trailer(18, 4)), BatchState::Overrun(3));
        assert_eq!(l.check(6, l.encode_trailer(7, 4)), BatchState::Corrupt);
        assert_eq!(l.check(6, [0xFF; 8]), BatchState::Corrupt);
    }

    #[test]
    fn append_bounds() {
        use AppendFormat::*;
        assert_eq!(
            AppendLayout::new(Sequenced, 10, 4, 4),
            Err(LayoutError::BadBatch)
        );
        assert_eq!(
            AppendLayout::new(Sequenced, 0, 4, 4),
            Err(LayoutError::BadBatch)
        );
        assert_eq!(
            AppendLayout::new(Sequenced, 32, 4, 17),
            Err(LayoutError::BadBatch)
        );
        assert_eq!(
            AppendLayout::new(Sequenced, 32, 4, 0),
            Err(LayoutError::BadBatch)
        );
        assert_eq!(
            AppendLayout::new(Sequenced, 32, 0, 4),
            Err(LayoutError::BadEntrySize)
        );
        assert_eq!(
            AppendLayout::new(Sequenced, 32, 33, 4),
            Err(LayoutError::BadEntrySize)
        );
        let max = AppendLayout::new(Sequenced, u32::MAX, 32, 1).unwrap();
        assert_eq!(max.region_len(), u32::MAX as u64 * 40);
        assert_eq!(AppendFormat::default(), Sequenced);
    }

    #[test]
    fn postcard_chunks() {
        let l = PostcardLayout::new(256, 5).unwrap();
        assert_eq!(
            (l.chunk_size(), l.words_len(), l.region_len()),
            (32, 20, 8192)
        );
        assert_eq!(l.chunk_offset(138), 138 * 32);
        assert_eq!(l.hop_offset(138, 4), 138 * 32 + 16);
        let sizes: Vec<u32> = [1, 2, 3, 4, 8, 9, 16]
            .iter()
            .map(|&h| PostcardLayout::new(2, h).unwrap().chunk_size())
            .collect();
        assert_eq!(sizes, [4, 8, 16, 16, 32, 64, 64]);
        assert_eq!(PostcardLayout::new(2, 0), Err(LayoutError::BadHops));
        assert_eq!(PostcardLayout::new(2, 17), Err(LayoutError::BadHops));
        assert_eq!(PostcardLayout::new(3, 5), Err(LayoutError::NotPowerOfTwo));
    }

    #[test]
    fn region_cap() {
        assert_eq!(region(1 << 34, 64), Ok(MAX_REGION_LEN));
        assert_eq!(region((1 << 34) + 1, 64), Err(LayoutError::TooLarge));
        assert_eq!(region(u64::MAX, 2), Err(LayoutError::TooLarge));
        assert_eq!(region(1 << 34, 64 >> 1), Ok(1 << 39));
    }

    proptest! {
        #[test]
        fn keywrite_round_trip(log in 1u32..=31, size in prop::sample::select(vec![8u32, 16, 32, 64]),
                               checksum: u32, value in prop::collection::vec(any::<u8>(), 0..=60),
                               slot: u32) {
            let l = KeyWriteLayout::new(1 << log, size).unwrap();
            prop_assert!(l.slot_offset(slot) + size as u64 <= l.region_len());
            let value = &value[..value.len().min(l.value_width())];
            let mut out = [0u8; 64];
            l.encode_slot(checksum, value, &mut out);
            let (c, v) = l.decode_slot(&out);
            prop_assert_eq!(c, checksum);
            prop_assert_eq!(&v[..value.len()], value);
            prop_assert!(v[value.len()..].iter().all(|&b| b == 0));
        }

        #[test]
        fn append_offsets_stay_inside(seq in any::<bool>(), batch in 1u32..=16, laps in 1u32..64,
                                      entry in 1u32..=32, s in 1u64..=AppendLayout::MAX_SEQ,
                                      count in 1u16..=16) {
            let format = if seq { AppendFormat::Sequenced } else { AppendFormat::Reference };
            let l = AppendLayout::new(format, batch * laps, entry, batch).unwrap();
            let j = l.slot_for_seq(s);
            prop_assert!(j < l.batch_slots());
            prop_assert!(l.batch_offset(j) + l.stride() as u64 <= l.region_len());
            prop_assert!(l.entry_offset(j, batch - 1) + entry as u64 <= l.region_len());
            if let Some(t) = l.trailer_offset(j) {
                prop_assert_eq!(t + 8, l.batch_offset(j) + l.stride() as u64);
            }
            let count = count.min(batch as u16);
            prop_assert_eq!(l.decode_trailer(l.encode_trailer(s, count)), Some((s, count)));
            prop_assert_eq!(l.check(s, l.encode_trailer(s, count)), BatchState::Ready(count));
        }

        #[test]
        fn trailer_decode_never_panics(t: [u8; 8], expected in 1u64..=AppendLayout::MAX_SEQ) {
            let l = AppendLayout::new(AppendFormat::Sequenced, 64, 4, 8).unwrap();
            let _ = l.decode_trailer(t);
            let _ = l.check(expected, t);
        }

        #[test]
        fn postcard_offsets_stay_inside(log in 1u32..=31, hops in 1u8..=16, c: u32) {
            let l = PostcardLayout::new(1 << log, hops).unwrap();
            let last = l.hop_offset(c, hops as usize - 1) + 4;
            prop_assert!(last <= l.chunk_offset(c) + l.chunk_size() as u64);
            prop_assert!(last <= l.region_len());
        }
    }
}
