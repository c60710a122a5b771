//! ZERO mode (Tao et al., ATC'22): the collector *pulls* metrics with one-sided RDMA READ from
//! agents on the monitored hosts, which registered their metric region with the RNIC once.
//! This module is the region's layout and the torn-read rule; the agent and the pull collector
//! build on it.
//!
//! # Region layout (little-endian)
//! ```text
//! offset 0     control header, 64 B
//! offset 64    block descriptors, 64 B each (`blocks` of them)
//! anywhere     metric blocks (8-byte aligned, inside the region, never overlapping the
//!              control area or each other)
//! ```
//! Control header: magic `DTAZ`, version u8 = 2, reserved u8, blocks u16, generation u32
//! (changes whenever the set of blocks changes: a reader holding an older generation re-reads
//! the descriptors), region length u64, reserved to 64 bytes.
//!
//! Descriptor: name (40 bytes, UTF-8, zero-padded), block offset u64, entries u32, kind u8
//! (1 counter: monotonic; 2 gauge), reserved u8 × 3, update interval in ms u32, reserved u32.
//!
//! # Metric blocks and torn reads
//! ```text
//! begin u64 | crc u32 | entries u32 | sampled_ns u64 | entries × u64 | end u64
//! ```
//! One writer (the agent) updates a block in this order: `begin` = s + 1 (odd: in progress);
//! the sample time and the values; `crc` = CRC-32C of (s + 2 as 8 LE bytes ‖ the entries count
//! ‖ the sample time ‖ the values); `end` = s + 2; `begin` = s + 2. A reader takes a snapshot
//! with one READ of the whole block and accepts it only if `begin == end`, it is even, and the
//! CRC matches ([`verify_block`]).
//!
//! # Sample time (version 2)
//! `sampled_ns` is when the agent took the values, in nanoseconds of the agent's own monotonic
//! clock (any origin, the same for every block of a region; 0: never sampled, the state a block
//! is registered in). It is inside the sealed part, so a snapshot's values and its time always
//! belong together. A reader derives a counter's rate from two snapshots of one block as
//! Δvalue / Δsampled_ns, never from when its READs completed: the agent and the reader run on
//! different clocks and schedules, and a READ that crosses a sample edge would otherwise halve
//! or double the rate. Two snapshots with the same `sampled_ns` are the same sample (no rate);
//! a `sampled_ns` of 0, or one not after the other's, gives no rate either. Version 1 blocks
//! had no sample time (`begin | crc | entries | values | end`); a version-1 region is refused
//! as [`ZeroError::BadMagic`].
//!
//! The sequence words alone would be a seqlock, which assumes the reader sees memory in
//! address order. A READ's DMA gives no such promise (InfiniBand orders nothing within one
//! READ response), so, as Pilaf does, the block also carries a checksum over the values and
//! the sequence: a snapshot mixing two updates fails the CRC even when both sequence words
//! happen to be new. A snapshot that fails is *torn*; the reader reads again. It is never
//! returned as data.

use crate::crc::Crc32;

/// The control header's magic, ASCII `DTAZ`.
pub const MAGIC: [u8; 4] = *b"DTAZ";
/// Layout version (2: blocks carry their sample time).
pub const VERSION: u8 = 2;
/// Version of the [`RegionRecord`] (unchanged by the block format).
pub const RECORD_VERSION: u8 = 1;
/// Bytes of the control header.
pub const HEADER_LEN: usize = 64;
/// Bytes of one block descriptor.
pub const DESC_LEN: usize = 64;
/// Bytes of a descriptor's name.
pub const NAME_LEN: usize = 40;
/// Most blocks one region describes.
pub const MAX_BLOCKS: u16 = 4096;
/// Most entries in one block (a 64 KiB READ).
pub const MAX_ENTRIES: u32 = 8190;
/// Bytes of a block before its values (begin, crc, entries, sampled_ns).
pub const BLOCK_HEAD_LEN: usize = 24;
/// Bytes of a block after its values (end).
pub const BLOCK_TAIL_LEN: usize = 8;

/// CRC-32C (Castagnoli), the block checksum.
static CRC32C: Crc32 = Crc32::new(0x1EDC_6F41);

/// What a block's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricKind {
    /// Monotonic counters (rates are derived from two snapshots).
    Counter,
    /// Instantaneous values.
    Gauge,
}

impl MetricKind {
    /// The descriptor code.
    pub const fn code(self) -> u8 {
        match self {
            MetricKind::Counter => 1,
            MetricKind::Gauge => 2,
        }
    }

    /// The kind for a code.
    pub const fn from_code(c: u8) -> Option<MetricKind> {
        match c {
            1 => Some(MetricKind::Counter),
            2 => Some(MetricKind::Gauge),
            _ => None,
        }
    }
}

/// Why a control area or a block was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroError {
    /// Shorter than the structure.
    Truncated,
    /// Not `DTAZ`, or another version.
    BadMagic,
    /// A field out of range (block count, entries, kind, a name that is not UTF-8).
    Malformed,
    /// A block outside the region, unaligned, or overlapping the control area or another block.
    BadPlacement,
    /// The snapshot's sequence words differ, or `begin` is odd: the writer was updating it.
    InProgress,
    /// The sequence words agree but the checksum does not: values from two updates.
    Torn,
}

/// Bytes of a [`RegionRecord`].
pub const RECORD_LEN: usize = 64;
/// A region record's magic, ASCII `DTZR`.
pub const RECORD_MAGIC: [u8; 4] = *b"DTZR";
/// Where an agent's REP carries the region record: private-data bytes 64..128 (the first 64
/// carry the service name, as the collector's REP does).
pub const RECORD_REP_OFFSET: usize = 64;

/// Byte offsets of the four structures: the one definition the views below read and write.
mod field {
    use core::ops::{Range, RangeFrom};

    // Control header.
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const RESERVED: usize = 5;
    pub const BLOCKS: Range<usize> = 6..8;
    pub const GENERATION: Range<usize> = 8..12;
    pub const REGION_LEN: Range<usize> = 12..20;
    pub const HEADER_PAD: Range<usize> = 20..super::HEADER_LEN;

    // Block descriptor.
    pub const NAME: Range<usize> = 0..super::NAME_LEN;
    pub const OFFSET: Range<usize> = 40..48;
    pub const ENTRIES: Range<usize> = 48..52;
    pub const KIND: usize = 52;
    pub const DESC_RESERVED: Range<usize> = 53..56;
    pub const INTERVAL: Range<usize> = 56..60;
    pub const DESC_PAD: Range<usize> = 60..super::DESC_LEN;

    // Metric block (the values and `end` follow `SAMPLED`).
    pub const BEGIN: Range<usize> = 0..8;
    pub const CRC: Range<usize> = 8..12;
    pub const COUNT: Range<usize> = 12..16;
    pub const SAMPLED: Range<usize> = 16..super::BLOCK_HEAD_LEN;
    /// What the CRC covers after the sequence and count: the sample time and the values.
    pub const SEALED: RangeFrom<usize> = SAMPLED.start..;

    // Region record.
    pub const R_MAGIC: Range<usize> = 0..4;
    pub const R_VERSION: usize = 4;
    pub const R_FLAGS: usize = 5;
    pub const R_RESERVED: Range<usize> = 6..8;
    pub const R_ADDR: Range<usize> = 8..16;
    pub const R_LEN: Range<usize> = 16..24;
    pub const R_RKEY: Range<usize> = 24..28;
    pub const R_PMTU: Range<usize> = 28..32;
    pub const R_PAD: Range<usize> = 32..60;
    /// The CRC covers every byte before it.
    pub const R_CRC: Range<usize> = 60..super::RECORD_LEN;
}

/// Region offset of a block's `crc` and entries count word, from the block's start (the agent
/// writes them as one little-endian u64: crc | count << 32).
pub const BLOCK_CRC_OFFSET: usize = field::CRC.start;
/// Offset of a block's sample time, from the block's start (the sealed part begins there).
pub const BLOCK_SAMPLED_OFFSET: usize = field::SAMPLED.start;

#[inline]
fn le16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_le_bytes(b[r].try_into().expect("2 bytes"))
}

#[inline]
fn le32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("4 bytes"))
}

#[inline]
fn le64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    u64::from_le_bytes(b[r].try_into().expect("8 bytes"))
}

/// Bytes of a block holding `entries` values.
pub const fn block_len(entries: u32) -> usize {
    BLOCK_HEAD_LEN + 8 * entries as usize + BLOCK_TAIL_LEN
}

crate::wire::view::fixed_view!(
    /// A view of a control header (the region's first 64 bytes).
    HeaderView,
    HEADER_LEN,
    ZeroError,
    ZeroError::Truncated
);

impl<T: AsRef<[u8]>> HeaderView<T> {
    /// The magic bytes.
    #[inline]
    pub fn magic(&self) -> [u8; 4] {
        self.buffer.as_ref()[field::MAGIC]
            .try_into()
            .expect("4 bytes")
    }

    /// The layout version.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// True if the reserved byte and the padding are zero.
    #[inline]
    pub fn reserved_is_zero(&self) -> bool {
        let b = self.buffer.as_ref();
        b[field::RESERVED] == 0 && b[field::HEADER_PAD].iter().all(|&x| x == 0)
    }

    /// Descriptors that follow.
    #[inline]
    pub fn blocks(&self) -> u16 {
        le16(self.buffer.as_ref(), field::BLOCKS)
    }

    /// The generation.
    #[inline]
    pub fn generation(&self) -> u32 {
        le32(self.buffer.as_ref(), field::GENERATION)
    }

    /// Bytes of the whole region.
    #[inline]
    pub fn region_len(&self) -> u64 {
        le64(self.buffer.as_ref(), field::REGION_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> HeaderView<T> {
    /// Sets the magic and version this module writes.
    #[inline]
    pub fn set_magic_version(&mut self) {
        let b = self.buffer.as_mut();
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
    }

    /// Sets the descriptor count.
    #[inline]
    pub fn set_blocks(&mut self, v: u16) {
        self.buffer.as_mut()[field::BLOCKS].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the generation.
    #[inline]
    pub fn set_generation(&mut self, v: u32) {
        self.buffer.as_mut()[field::GENERATION].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the region length.
    #[inline]
    pub fn set_region_len(&mut self, v: u64) {
        self.buffer.as_mut()[field::REGION_LEN].copy_from_slice(&v.to_le_bytes());
    }
}

/// The control header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlHeader {
    /// Descriptors that follow.
    pub blocks: u16,
    /// Changes whenever the set of blocks changes.
    pub generation: u32,
    /// Bytes of the whole region.
    pub region_len: u64,
}

impl ControlHeader {
    /// Reads a checked view: magic, version, reserved bytes and block count.
    pub fn parse<T: AsRef<[u8]>>(h: &HeaderView<T>) -> Result<ControlHeader, ZeroError> {
        if h.magic() != MAGIC || h.version() != VERSION {
            return Err(ZeroError::BadMagic);
        }
        if !h.reserved_is_zero() {
            return Err(ZeroError::Malformed);
        }
        let blocks = h.blocks();
        if blocks > MAX_BLOCKS {
            return Err(ZeroError::Malformed);
        }
        Ok(ControlHeader {
            blocks,
            generation: h.generation(),
            region_len: h.region_len(),
        })
    }

    /// Writes every field (reserved bytes zero) into a view of [`HEADER_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut HeaderView<T>) {
        h.buffer.as_mut()[..HEADER_LEN].fill(0);
        h.set_magic_version();
        h.set_blocks(self.blocks);
        h.set_generation(self.generation);
        h.set_region_len(self.region_len);
    }

    /// The 64-byte header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        self.emit(&mut HeaderView::new_unchecked(&mut h[..]));
        h
    }

    /// Reads a header back.
    pub fn decode(h: &[u8]) -> Result<ControlHeader, ZeroError> {
        ControlHeader::parse(&HeaderView::new_checked(h)?)
    }

    /// Bytes of the control area (header and descriptors): what a reader READs first.
    pub fn control_len(&self) -> usize {
        HEADER_LEN + self.blocks as usize * DESC_LEN
    }
}

crate::wire::view::fixed_view!(
    /// A view of one 64-byte block descriptor.
    DescView,
    DESC_LEN,
    ZeroError,
    ZeroError::Truncated
);

impl<T: AsRef<[u8]>> DescView<T> {
    /// The name field, zero padding included.
    #[inline]
    pub fn name_field(&self) -> &[u8] {
        &self.buffer.as_ref()[field::NAME]
    }

    /// Region offset of the block.
    #[inline]
    pub fn offset(&self) -> u64 {
        le64(self.buffer.as_ref(), field::OFFSET)
    }

    /// Values in the block.
    #[inline]
    pub fn entries(&self) -> u32 {
        le32(self.buffer.as_ref(), field::ENTRIES)
    }

    /// The kind code.
    #[inline]
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The update interval in ms.
    #[inline]
    pub fn interval_ms(&self) -> u32 {
        le32(self.buffer.as_ref(), field::INTERVAL)
    }

    /// True if the reserved bytes are zero.
    #[inline]
    pub fn reserved_is_zero(&self) -> bool {
        let b = self.buffer.as_ref();
        b[field::DESC_RESERVED] == [0; 3] && b[field::DESC_PAD] == [0; 4]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DescView<T> {
    /// The name field to write into.
    #[inline]
    pub fn name_field_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::NAME]
    }

    /// Sets the block offset.
    #[inline]
    pub fn set_offset(&mut self, v: u64) {
        self.buffer.as_mut()[field::OFFSET].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the entry count.
    #[inline]
    pub fn set_entries(&mut self, v: u32) {
        self.buffer.as_mut()[field::ENTRIES].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the kind code.
    #[inline]
    pub fn set_kind(&mut self, v: u8) {
        self.buffer.as_mut()[field::KIND] = v;
    }

    /// Sets the update interval.
    #[inline]
    pub fn set_interval_ms(&mut self, v: u32) {
        self.buffer.as_mut()[field::INTERVAL].copy_from_slice(&v.to_le_bytes());
    }
}

/// One block descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDesc {
    /// The block's name (`net/eth0`, `cpu`, an application's array), at most 40 bytes.
    pub name: String,
    /// Region offset of the block.
    pub offset: u64,
    /// Values in the block.
    pub entries: u32,
    /// What they are.
    pub kind: MetricKind,
    /// How often the agent updates them (ms; a reader pulling faster sees repeats).
    pub interval_ms: u32,
}

impl BlockDesc {
    /// Bytes of the block.
    pub fn len(&self) -> usize {
        block_len(self.entries)
    }

    /// True if the block holds no values (never: descriptors with 0 entries are refused).
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Reads a checked view (placement is checked by [`decode_control`]).
    pub fn parse<T: AsRef<[u8]>>(d: &DescView<T>) -> Result<BlockDesc, ZeroError> {
        let name = d.name_field();
        let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        if name[end..].iter().any(|&b| b != 0) || !d.reserved_is_zero() {
            return Err(ZeroError::Malformed);
        }
        let name = std::str::from_utf8(&name[..end]).map_err(|_| ZeroError::Malformed)?;
        let entries = d.entries();
        if entries == 0 || entries > MAX_ENTRIES {
            return Err(ZeroError::Malformed);
        }
        Ok(BlockDesc {
            name: name.to_string(),
            offset: d.offset(),
            entries,
            kind: MetricKind::from_code(d.kind()).ok_or(ZeroError::Malformed)?,
            interval_ms: d.interval_ms(),
        })
    }

    /// Writes the descriptor (reserved bytes zero) into a view of [`DESC_LEN`] bytes; `None`
    /// (nothing written) if the name is longer than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, d: &mut DescView<T>) -> Option<()> {
        let name = self.name.as_bytes();
        if name.len() > NAME_LEN {
            return None;
        }
        d.buffer.as_mut()[..DESC_LEN].fill(0);
        d.name_field_mut()[..name.len()].copy_from_slice(name);
        d.set_offset(self.offset);
        d.set_entries(self.entries);
        d.set_kind(self.kind.code());
        d.set_interval_ms(self.interval_ms);
        Some(())
    }

    /// The 64-byte descriptor; `None` if the name is longer than 40 bytes.
    pub fn encode(&self) -> Option<[u8; DESC_LEN]> {
        let mut d = [0u8; DESC_LEN];
        self.emit(&mut DescView::new_unchecked(&mut d[..]))?;
        Some(d)
    }

    /// Reads a descriptor back (placement is checked by [`decode_control`]).
    pub fn decode(d: &[u8]) -> Result<BlockDesc, ZeroError> {
        BlockDesc::parse(&DescView::new_checked(d)?)
    }
}

/// Reads a whole control area (header and descriptors) and checks every block's placement:
/// 8-byte aligned, inside `region_len`, after the control area, and not overlapping another.
pub fn decode_control(c: &[u8]) -> Result<(ControlHeader, Vec<BlockDesc>), ZeroError> {
    let h = ControlHeader::decode(c)?;
    let area = c.get(..h.control_len()).ok_or(ZeroError::Truncated)?;
    let mut descs = Vec::with_capacity(h.blocks as usize);
    for d in area[HEADER_LEN..].chunks_exact(DESC_LEN) {
        descs.push(BlockDesc::parse(&DescView::new_unchecked(d))?);
    }
    check_placement(&h, &descs)?;
    Ok((h, descs))
}

/// Checks that `descs` fit `h`'s region (see [`decode_control`]).
pub fn check_placement(h: &ControlHeader, descs: &[BlockDesc]) -> Result<(), ZeroError> {
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(descs.len());
    for d in descs {
        let end = d
            .offset
            .checked_add(d.len() as u64)
            .ok_or(ZeroError::BadPlacement)?;
        if d.offset % 8 != 0 || d.offset < h.control_len() as u64 || end > h.region_len {
            return Err(ZeroError::BadPlacement);
        }
        spans.push((d.offset, end));
    }
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(ZeroError::BadPlacement);
    }
    Ok(())
}

/// The CRC a block carries after an update to sequence `seq` (even): CRC-32C of `seq` (8 LE
/// bytes), the entries count (4 LE bytes), then `body`: the sample time (8 LE bytes) and the
/// values as stored (8 LE bytes each), exactly as they lie in the block after its count.
pub fn block_crc(seq: u64, count: u32, body: &[u8]) -> u32 {
    let mut r = crate::crc::CRC_INIT;
    r = CRC32C.update(r, &seq.to_le_bytes());
    r = CRC32C.update(r, &count.to_le_bytes());
    !CRC32C.update(r, body)
}

/// A view of a metric block as one READ returned it (or as it lies in the region).
#[derive(Debug, Clone, Copy)]
pub struct BlockView<T: AsRef<[u8]>> {
    buffer: T,
    entries: usize,
}

impl<T: AsRef<[u8]>> BlockView<T> {
    /// Wraps a buffer holding a block of `entries` values without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T, entries: u32) -> BlockView<T> {
        BlockView {
            buffer,
            entries: entries as usize,
        }
    }

    /// Wraps a buffer of at least [`block_len`]`(entries)` bytes.
    #[inline]
    pub fn new_checked(buffer: T, entries: u32) -> Result<BlockView<T>, ZeroError> {
        if buffer.as_ref().len() < block_len(entries) {
            return Err(ZeroError::Truncated);
        }
        Ok(BlockView::new_unchecked(buffer, entries))
    }

    /// Offset of `end`, just past the values.
    #[inline]
    fn values_end(&self) -> usize {
        BLOCK_HEAD_LEN + 8 * self.entries
    }

    /// The `begin` sequence word.
    #[inline]
    pub fn begin(&self) -> u64 {
        le64(self.buffer.as_ref(), field::BEGIN)
    }

    /// The `end` sequence word.
    #[inline]
    pub fn end(&self) -> u64 {
        let at = self.values_end();
        le64(self.buffer.as_ref(), at..at + BLOCK_TAIL_LEN)
    }

    /// The stored CRC.
    #[inline]
    pub fn crc(&self) -> u32 {
        le32(self.buffer.as_ref(), field::CRC)
    }

    /// The stored entries count.
    #[inline]
    pub fn count(&self) -> u32 {
        le32(self.buffer.as_ref(), field::COUNT)
    }

    /// The sample time.
    #[inline]
    pub fn sampled_ns(&self) -> u64 {
        le64(self.buffer.as_ref(), field::SAMPLED)
    }

    /// What the CRC covers after sequence and count: the sample time and the values.
    #[inline]
    pub fn sealed(&self) -> &[u8] {
        &self.buffer.as_ref()[field::SEALED][..self.values_end() - field::SEALED.start]
    }

    /// The values, 8 LE bytes each.
    #[inline]
    pub fn values(&self) -> &[u8] {
        &self.buffer.as_ref()[BLOCK_HEAD_LEN..self.values_end()]
    }
}

impl<'a> BlockView<&'a [u8]> {
    /// The values, borrowed for as long as the buffer.
    #[inline]
    pub fn into_values(self) -> &'a [u8] {
        let end = self.values_end();
        &self.buffer[BLOCK_HEAD_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BlockView<T> {
    /// Sets both sequence words.
    #[inline]
    pub fn set_seq(&mut self, seq: u64) {
        let at = self.values_end();
        let b = self.buffer.as_mut();
        b[field::BEGIN].copy_from_slice(&seq.to_le_bytes());
        b[at..at + BLOCK_TAIL_LEN].copy_from_slice(&seq.to_le_bytes());
    }

    /// Sets the CRC.
    #[inline]
    pub fn set_crc(&mut self, v: u32) {
        self.buffer.as_mut()[field::CRC].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the entries count.
    #[inline]
    pub fn set_count(&mut self, v: u32) {
        self.buffer.as_mut()[field::COUNT].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the sample time.
    #[inline]
    pub fn set_sampled_ns(&mut self, v: u64) {
        self.buffer.as_mut()[field::SAMPLED].copy_from_slice(&v.to_le_bytes());
    }

    /// The values to write into.
    #[inline]
    pub fn values_mut(&mut self) -> &mut [u8] {
        let end = self.values_end();
        &mut self.buffer.as_mut()[BLOCK_HEAD_LEN..end]
    }
}

/// The bytes of a block at rest after the update to `seq` (even) of a sample taken at
/// `sampled_ns`: what a reader that does not race the writer sees. `out` must be
/// [`block_len`]`(values.len())` bytes.
pub fn encode_block(seq: u64, sampled_ns: u64, values: &[u64], out: &mut [u8]) {
    let n = values.len();
    let mut b = BlockView::new_unchecked(out, n as u32);
    b.set_seq(seq);
    b.set_count(n as u32);
    b.set_sampled_ns(sampled_ns);
    for (c, v) in b.values_mut().chunks_exact_mut(8).zip(values) {
        c.copy_from_slice(&v.to_le_bytes());
    }
    let crc = block_crc(seq, n as u32, b.sealed());
    b.set_crc(crc);
}

/// What a pull collector needs to READ an agent's region, sent by the agent in the private data
/// of its RDMA_CM REP (`rdma_accept`'s `private_data` on a real RNIC), so the connection is
/// usable at RTU with no SEND.
///
/// ```text
/// 0 magic DTZR | 4 version 1 | 5 flags (bit 0: the agent checks the ICRC) | 6..8 zero
/// 8 address u64 | 16 length u64 | 24 R_Key u32 | 28 path MTU u32 | 32..60 zero
/// 60 CRC-32C of bytes 0..60
/// ```
///
/// The path MTU is the agent's: its READ responses carry that many bytes each (but the last),
/// so the requester counts a READ's PSNs with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionRecord {
    /// Virtual address of the region's first byte (the control header).
    pub addr: u64,
    /// Region length in bytes.
    pub len: u64,
    /// The region's R_Key (READ only).
    pub rkey: u32,
    /// The agent verifies the ICRC of requests.
    pub verify_icrc: bool,
    /// The agent's path MTU (256..=4096, a power of two).
    pub pmtu: u32,
}

crate::wire::view::fixed_view!(
    /// A view of a 64-byte region record.
    RecordView,
    RECORD_LEN,
    ZeroError,
    ZeroError::Truncated
);

impl<T: AsRef<[u8]>> RecordView<T> {
    /// The magic bytes.
    #[inline]
    pub fn magic(&self) -> [u8; 4] {
        self.buffer.as_ref()[field::R_MAGIC]
            .try_into()
            .expect("4 bytes")
    }

    /// The record version.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::R_VERSION]
    }

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::R_FLAGS]
    }

    /// True if the reserved bytes and the padding are zero.
    #[inline]
    pub fn reserved_is_zero(&self) -> bool {
        let b = self.buffer.as_ref();
        b[field::R_RESERVED] == [0; 2] && b[field::R_PAD].iter().all(|&x| x == 0)
    }

    /// The region's address.
    #[inline]
    pub fn addr(&self) -> u64 {
        le64(self.buffer.as_ref(), field::R_ADDR)
    }

    /// The region's length.
    #[inline]
    pub fn len(&self) -> u64 {
        le64(self.buffer.as_ref(), field::R_LEN)
    }

    /// True if the length field is 0.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The R_Key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        le32(self.buffer.as_ref(), field::R_RKEY)
    }

    /// The path MTU.
    #[inline]
    pub fn pmtu(&self) -> u32 {
        le32(self.buffer.as_ref(), field::R_PMTU)
    }

    /// The stored CRC.
    #[inline]
    pub fn crc(&self) -> u32 {
        le32(self.buffer.as_ref(), field::R_CRC)
    }

    /// The CRC the bytes before the CRC field have.
    #[inline]
    pub fn computed_crc(&self) -> u32 {
        CRC32C.checksum(&self.buffer.as_ref()[..field::R_CRC.start])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RecordView<T> {
    /// Sets the magic and version this module writes.
    #[inline]
    pub fn set_magic_version(&mut self) {
        let b = self.buffer.as_mut();
        b[field::R_MAGIC].copy_from_slice(&RECORD_MAGIC);
        b[field::R_VERSION] = RECORD_VERSION;
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::R_FLAGS] = v;
    }

    /// Sets the region's address.
    #[inline]
    pub fn set_addr(&mut self, v: u64) {
        self.buffer.as_mut()[field::R_ADDR].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the region's length.
    #[inline]
    pub fn set_len(&mut self, v: u64) {
        self.buffer.as_mut()[field::R_LEN].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the R_Key.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        self.buffer.as_mut()[field::R_RKEY].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the path MTU.
    #[inline]
    pub fn set_pmtu(&mut self, v: u32) {
        self.buffer.as_mut()[field::R_PMTU].copy_from_slice(&v.to_le_bytes());
    }

    /// Seals the record: the CRC of every byte before it.
    #[inline]
    pub fn fill_crc(&mut self) {
        let crc = self.computed_crc();
        self.buffer.as_mut()[field::R_CRC].copy_from_slice(&crc.to_le_bytes());
    }
}

impl RegionRecord {
    /// Reads a checked view: magic, version, CRC, flags and reserved bytes are checked.
    pub fn parse<T: AsRef<[u8]>>(r: &RecordView<T>) -> Result<RegionRecord, ZeroError> {
        if r.magic() != RECORD_MAGIC || r.version() != RECORD_VERSION {
            return Err(ZeroError::BadMagic);
        }
        if r.computed_crc() != r.crc() || r.flags() > 1 || !r.reserved_is_zero() {
            return Err(ZeroError::Malformed);
        }
        let (len, pmtu) = (r.len(), r.pmtu());
        if (len as usize) < HEADER_LEN || !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() {
            return Err(ZeroError::Malformed);
        }
        Ok(RegionRecord {
            addr: r.addr(),
            len,
            rkey: r.rkey(),
            verify_icrc: r.flags() == 1,
            pmtu,
        })
    }

    /// Writes and seals the record (reserved bytes zero) into a view of [`RECORD_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, r: &mut RecordView<T>) {
        r.buffer.as_mut()[..RECORD_LEN].fill(0);
        r.set_magic_version();
        r.set_flags(self.verify_icrc as u8);
        r.set_addr(self.addr);
        r.set_len(self.len);
        r.set_rkey(self.rkey);
        r.set_pmtu(self.pmtu);
        r.fill_crc();
    }

    /// The 64-byte record.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut r = [0u8; RECORD_LEN];
        self.emit(&mut RecordView::new_unchecked(&mut r[..]));
        r
    }

    /// Reads a record back: magic, version, CRC, flags and reserved bytes are checked.
    pub fn decode(r: &[u8]) -> Result<RegionRecord, ZeroError> {
        RegionRecord::parse(&RecordView::new_checked(r)?)
    }
}

/// A consistent snapshot of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The update it shows (the sequence word: 2 × updates).
    pub seq: u64,
    /// When the agent took the values (ns of its own clock; 0: never sampled).
    pub sampled_ns: u64,
    /// The values, 8 LE bytes each.
    pub values: &'a [u8],
}

impl Snapshot<'_> {
    /// Value `i`.
    pub fn value(&self, i: usize) -> Option<u64> {
        let b = self.values.get(8 * i..8 * i + 8)?;
        Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// Every value.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.values
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
    }
}

/// Checks a block as one READ returned it (`entries` from its descriptor): the snapshot, or why
/// it must be read again.
pub fn verify_block(b: &[u8], entries: u32) -> Result<Snapshot<'_>, ZeroError> {
    let v = BlockView::new_checked(b, entries)?;
    let (begin, end) = (v.begin(), v.end());
    if begin != end || begin % 2 == 1 {
        return Err(ZeroError::InProgress);
    }
    let count = v.count();
    if count != entries || block_crc(begin, count, v.sealed()) != v.crc() {
        return Err(ZeroError::Torn);
    }
    Ok(Snapshot {
        seq: begin,
        sampled_ns: v.sampled_ns(),
        values: v.into_values(),
    })
}

#[cfg(test)]
mod tests;
