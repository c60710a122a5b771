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

/// Bytes of a block holding `entries` values.
pub const fn block_len(entries: u32) -> usize {
    BLOCK_HEAD_LEN + 8 * entries as usize + BLOCK_TAIL_LEN
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
    /// The 64-byte header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[6..8].copy_from_slice(&self.blocks.to_le_bytes());
        h[8..12].copy_from_slice(&self.generation.to_le_bytes());
        h[12..20].copy_from_slice(&self.region_len.to_le_bytes());
        h
    }

    /// Reads a header back.
    pub fn decode(h: &[u8]) -> Result<ControlHeader, ZeroError> {
        let h = h.get(..HEADER_LEN).ok_or(ZeroError::Truncated)?;
        if h[0..4] != MAGIC || h[4] != VERSION {
            return Err(ZeroError::BadMagic);
        }
        if h[5] != 0 || h[20..].iter().any(|&b| b != 0) {
            return Err(ZeroError::Malformed);
        }
        let blocks = u16::from_le_bytes([h[6], h[7]]);
        if blocks > MAX_BLOCKS {
            return Err(ZeroError::Malformed);
        }
        Ok(ControlHeader {
            blocks,
            generation: u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")),
            region_len: u64::from_le_bytes(h[12..20].try_into().expect("8 bytes")),
        })
    }

    /// Bytes of the control area (header and descriptors): what a reader READs first.
    pub fn control_len(&self) -> usize {
        HEADER_LEN + self.blocks as usize * DESC_LEN
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

    /// The 64-byte descriptor; `None` if the name is longer than 40 bytes.
    pub fn encode(&self) -> Option<[u8; DESC_LEN]> {
        let mut d = [0u8; DESC_LEN];
        let name = self.name.as_bytes();
        d.get_mut(..name.len())?.copy_from_slice(name);
        if name.len() > NAME_LEN {
            return None;
        }
        d[40..48].copy_from_slice(&self.offset.to_le_bytes());
        d[48..52].copy_from_slice(&self.entries.to_le_bytes());
        d[52] = self.kind.code();
        d[56..60].copy_from_slice(&self.interval_ms.to_le_bytes());
        Some(d)
    }

    /// Reads a descriptor back (placement is checked by [`decode_control`]).
    pub fn decode(d: &[u8]) -> Result<BlockDesc, ZeroError> {
        let d = d.get(..DESC_LEN).ok_or(ZeroError::Truncated)?;
        let end = d[..NAME_LEN]
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(NAME_LEN);
        if d[end..NAME_LEN].iter().any(|&b| b != 0) || d[53..56] != [0; 3] || d[60..] != [0; 4] {
            return Err(ZeroError::Malformed);
        }
        let name = std::str::from_utf8(&d[..end]).map_err(|_| ZeroError::Malformed)?;
        let entries = u32::from_le_bytes(d[48..52].try_into().expect("4 bytes"));
        if entries == 0 || entries > MAX_ENTRIES {
            return Err(ZeroError::Malformed);
        }
        Ok(BlockDesc {
            name: name.to_string(),
            offset: u64::from_le_bytes(d[40..48].try_into().expect("8 bytes")),
            entries,
            kind: MetricKind::from_code(d[52]).ok_or(ZeroError::Malformed)?,
            interval_ms: u32::from_le_bytes(d[56..60].try_into().expect("4 bytes")),
        })
    }
}

/// Reads a whole control area (header and descriptors) and checks every block's placement:
/// 8-byte aligned, inside `region_len`, after the control area, and not overlapping another.
pub fn decode_control(c: &[u8]) -> Result<(ControlHeader, Vec<BlockDesc>), ZeroError> {
    let h = ControlHeader::decode(c)?;
    let area = c.get(..h.control_len()).ok_or(ZeroError::Truncated)?;
    let mut descs = Vec::with_capacity(h.blocks as usize);
    for i in 0..h.blocks as usize {
        let at = HEADER_LEN + i * DESC_LEN;
        descs.push(BlockDesc::decode(&area[at..at + DESC_LEN])?);
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

/// The bytes of a block at rest after the update to `seq` (even) of a sample taken at
/// `sampled_ns`: what a reader that does not race the writer sees. `out` must be
/// [`block_len`]`(values.len())` bytes.
pub fn encode_block(seq: u64, sampled_ns: u64, values: &[u64], out: &mut [u8]) {
    let n = values.len();
    let end = BLOCK_HEAD_LEN + 8 * n;
    out[0..8].copy_from_slice(&seq.to_le_bytes());
    out[12..16].copy_from_slice(&(n as u32).to_le_bytes());
    out[16..24].copy_from_slice(&sampled_ns.to_le_bytes());
    for (c, v) in out[BLOCK_HEAD_LEN..end].chunks_exact_mut(8).zip(values) {
        c.copy_from_slice(&v.to_le_bytes());
    }
    let crc = block_crc(seq, n as u32, &out[16..end]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out[end..end + BLOCK_TAIL_LEN].copy_from_slice(&seq.to_le_bytes());
}

/// Bytes of a [`RegionRecord`].
pub const RECORD_LEN: usize = 64;
/// A region record's magic, ASCII `DTZR`.
pub const RECORD_MAGIC: [u8; 4] = *b"DTZR";
/// Where an agent's REP carries the region record: private-data bytes 64..128 (the first 64
/// carry the service name, as the collector's REP does).
pub const RECORD_REP_OFFSET: usize = 64;

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

impl RegionRecord {
    /// The 64-byte record.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut r = [0u8; RECORD_LEN];
        r[0..4].copy_from_slice(&RECORD_MAGIC);
        r[4] = RECORD_VERSION;
        r[5] = self.verify_icrc as u8;
        r[8..16].copy_from_slice(&self.addr.to_le_bytes());
        r[16..24].copy_from_slice(&self.len.to_le_bytes());
        r[24..28].copy_from_slice(&self.rkey.to_le_bytes());
        r[28..32].copy_from_slice(&self.pmtu.to_le_bytes());
        let crc = CRC32C.checksum(&r[..60]);
        r[60..64].copy_from_slice(&crc.to_le_bytes());
        r
    }

    /// Reads a record back: magic, version, CRC, flags and reserved bytes are checked.
    pub fn decode(r: &[u8]) -> Result<RegionRecord, ZeroError> {
        let r = r.get(..RECORD_LEN).ok_or(ZeroError::Truncated)?;
        if r[0..4] != RECORD_MAGIC || r[4] != RECORD_VERSION {
            return Err(ZeroError::BadMagic);
        }
        let crc = u32::from_le_bytes(r[60..64].try_into().expect("4 bytes"));
        if CRC32C.checksum(&r[..60]) != crc
            || r[5] > 1
            || r[6..8] != [0; 2]
            || r[32..60].iter().any(|&b| b != 0)
        {
            return Err(ZeroError::Malformed);
        }
        let len = u64::from_le_bytes(r[16..24].try_into().expect("8 bytes"));
        let pmtu = u32::from_le_bytes(r[28..32].try_into().expect("4 bytes"));
        if (len as usize) < HEADER_LEN || !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() {
            return Err(ZeroError::Malformed);
        }
        Ok(RegionRecord {
            addr: u64::from_le_bytes(r[8..16].try_into().expect("8 bytes")),
            len,
            rkey: u32::from_le_bytes(r[24..28].try_into().expect("4 bytes")),
            verify_icrc: r[5] == 1,
            pmtu,
        })
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
    let n = entries as usize;
    let b = b.get(..block_len(entries)).ok_or(ZeroError::Truncated)?;
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let values_end = BLOCK_HEAD_LEN + 8 * n;
    let (begin, end) = (word(0), word(values_end));
    if begin != end || begin % 2 == 1 {
        return Err(ZeroError::InProgress);
    }
    let crc = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
    if count != entries || block_crc(begin, count, &b[16..values_end]) != crc {
        return Err(ZeroError::Torn);
    }
    Ok(Snapshot {
        seq: begin,
        sampled_ns: word(16),
        values: &b[BLOCK_HEAD_LEN..values_end],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(name: &str, offset: u64, entries: u32) -> BlockDesc {
        BlockDesc {
            name: name.into(),
            offset,
            entries,
            kind: MetricKind::Counter,
            interval_ms: 100,
        }
    }

    fn control(descs: &[BlockDesc], region_len: u64) -> Vec<u8> {
        let h = ControlHeader {
            blocks: descs.len() as u16,
            generation: 7,
            region_len,
        };
        let mut c = h.encode().to_vec();
        for d in descs {
            c.extend_from_slice(&d.encode().unwrap());
        }
        c
    }

    #[test]
    fn region_records_round_trip_and_damaged_ones_are_refused() {
        let r = RegionRecord {
            addr: 0x7f00_1234_5000,
            len: 1 << 20,
            rkey: 0xABCD_EF01,
            verify_icrc: true,
            pmtu: 1024,
        };
        let b = r.encode();
        assert_eq!(RegionRecord::decode(&b), Ok(r));
        assert_eq!(RegionRecord::decode(&b[..63]), Err(ZeroError::Truncated));
        for at in [0usize, 4] {
            let mut x = b;
            x[at] ^= 1;
            assert_eq!(RegionRecord::decode(&x), Err(ZeroError::BadMagic));
        }
        for at in [5usize, 9, 29, 40, 61] {
            let mut x = b;
            x[at] ^= 2;
            assert_eq!(
                RegionRecord::decode(&x),
                Err(ZeroError::Malformed),
                "byte {at}"
            );
        }
    }

    #[test]
    fn control_areas_round_trip_and_hostile_ones_are_refused() {
        let ds = vec![desc("net/eth0", 256, 16), desc("cpu", 512, 10)];
        let c = control(&ds, 4096);
        let (h, back) = decode_control(&c).unwrap();
        assert_eq!((h.blocks, h.generation, h.region_len), (2, 7, 4096));
        assert_eq!(back, ds);
        assert_eq!(decode_control(&c[..100]), Err(ZeroError::Truncated));
        let mut bad = c.clone();
        bad[4] = 3;
        assert_eq!(decode_control(&bad), Err(ZeroError::BadMagic));
        let place = |ds: &[BlockDesc]| decode_control(&control(ds, 4096)).err();
        // Unaligned, inside the control area, beyond the region, overlapping, overflowing.
        assert_eq!(place(&[desc("a", 260, 1)]), Some(ZeroError::BadPlacement));
        assert_eq!(place(&[desc("a", 64, 1)]), Some(ZeroError::BadPlacement));
        assert_eq!(place(&[desc("a", 4088, 1)]), Some(ZeroError::BadPlacement));
        assert_eq!(
            place(&[desc("a", 256, 16), desc("b", 384, 1)]),
            Some(ZeroError::BadPlacement)
        );
        assert_eq!(
            place(&[desc("a", u64::MAX - 7, 1)]),
            Some(ZeroError::BadPlacement)
        );
        // Entries 0 or too many, an unknown kind, a name that is not UTF-8.
        for (at, v) in [(48usize, 0u8), (52, 9), (0, 0xFF)] {
            let mut d = desc("x", 256, 4).encode().unwrap();
            if at == 48 {
                d[48..52].fill(0);
            } else if at == 52 {
                d[52] = v;
            } else {
                d[0] = v;
            }
            assert_eq!(BlockDesc::decode(&d), Err(ZeroError::Malformed));
        }
        let mut d = desc("x", 256, 4).encode().unwrap();
        d[48..52].copy_from_slice(&(MAX_ENTRIES + 1).to_le_bytes());
        assert_eq!(BlockDesc::decode(&d), Err(ZeroError::Malformed));
        assert_eq!(desc(&"n".repeat(41), 256, 1).encode(), None);
    }

    /// Every way a READ can interleave with one update (each 8-byte word from before or after
    /// it, in any combination the writer's order allows or not) is either the old snapshot,
    /// the new one, or refused: never a mix.
    #[test]
    fn a_snapshot_is_the_old_values_the_new_ones_or_refused() {
        let old: Vec<u64> = (0..5).map(|i| 100 + i).collect();
        let new: Vec<u64> = (0..5).map(|i| 200 + i * 3).collect();
        let len = block_len(5);
        let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
        encode_block(10, 5_000_000_000, &old, &mut a);
        encode_block(12, 6_000_000_000, &new, &mut b);
        // The in-progress state: begin odd, values partly new.
        let words = len / 8;
        let mut accepted = 0;
        for mask in 0u32..(1 << words) {
            let mut m = vec![0u8; len];
            for w in 0..words {
                let src = if mask & (1 << w) != 0 { &b } else { &a };
                m[8 * w..8 * w + 8].copy_from_slice(&src[8 * w..8 * w + 8]);
            }
            match verify_block(&m, 5) {
                Ok(s) => {
                    let v: Vec<u64> = s.iter().collect();
                    assert!(
                        (s.seq == 10 && s.sampled_ns == 5_000_000_000 && v == old)
                            || (s.seq == 12 && s.sampled_ns == 6_000_000_000 && v == new),
                        "mask {mask:#x}: a mixed snapshot {v:?} at {}",
                        s.sampled_ns
                    );
                    accepted += 1;
                }
                Err(e) => assert!(matches!(e, ZeroError::InProgress | ZeroError::Torn)),
            }
        }
        assert_eq!(accepted, 2, "exactly the two whole snapshots");
        let mut odd = a.clone();
        odd[0..8].copy_from_slice(&11u64.to_le_bytes());
        assert_eq!(verify_block(&odd, 5), Err(ZeroError::InProgress));
        assert_eq!(verify_block(&a[..len - 1], 5), Err(ZeroError::Truncated));
        let s = verify_block(&a, 5).unwrap();
        assert_eq!((s.value(4), s.value(5)), (Some(104), None));
        // CRC-32C (check value of "123456789": 0xE3069283) over seq, count, sample time and
        // values.
        assert_eq!(CRC32C.checksum(b"123456789"), 0xE306_9283);
        let mut bytes = 12u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&5u32.to_le_bytes());
        bytes.extend_from_slice(&6_000_000_000u64.to_le_bytes());
        new.iter()
            .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
        assert_eq!(block_crc(12, 5, &bytes[12..]), CRC32C.checksum(&bytes));
        // Both sequence words new but a value torn: the checksum catches it.
        let mut t = b.clone();
        t[24..32].copy_from_slice(&a[24..32]);
        assert_eq!(verify_block(&t, 5), Err(ZeroError::Torn));
    }

    /// A version-2 block written byte by byte from the layout in the module documentation:
    /// the sample time sits after the entries count and is sealed by the CRC with the values,
    /// so a snapshot cannot pair one sample's values with another's time.
    #[test]
    fn a_block_by_hand_carries_its_sealed_sample_time() {
        let mut blk = Vec::new();
        blk.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]); // begin = 4
        blk.extend_from_slice(&[0; 4]); // crc, below
        blk.extend_from_slice(&[2, 0, 0, 0]); // entries = 2
        blk.extend_from_slice(&[0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01]); // sampled_ns
        blk.extend_from_slice(&[0x2a, 0, 0, 0, 0, 0, 0, 0]); // value 0 = 42
        blk.extend_from_slice(&[0xff; 8]); // value 1 = u64::MAX
        blk.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]); // end = 4
                                                          // CRC-32C of begin (8 LE bytes) ‖ entries ‖ sampled_ns ‖ values.
        let mut sealed = blk[0..8].to_vec();
        sealed.extend_from_slice(&blk[12..40]);
        let crc = CRC32C.checksum(&sealed);
        blk[8..12].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(blk.len(), block_len(2));
        let s = verify_block(&blk, 2).unwrap();
        assert_eq!(
            (s.seq, s.sampled_ns, s.value(0), s.value(1)),
            (4, 0x0102_0304_0506_0708, Some(42), Some(u64::MAX))
        );
        let mut out = vec![0u8; block_len(2)];
        encode_block(4, 0x0102_0304_0506_0708, &[42, u64::MAX], &mut out);
        assert_eq!(out, blk, "the encoder writes the same bytes");
        // Any bit of the sample time changed: torn, never a snapshot at another time.
        for bit in 0..64 {
            let mut x = blk.clone();
            x[16 + bit / 8] ^= 1 << (bit % 8);
            assert_eq!(verify_block(&x, 2), Err(ZeroError::Torn), "bit {bit}");
        }
        // A version-1 region (no sample times) is refused, not misread.
        let mut h = ControlHeader {
            blocks: 0,
            generation: 1,
            region_len: 4096,
        }
        .encode();
        assert_eq!(h[4], 2);
        h[4] = 1;
        assert_eq!(ControlHeader::decode(&h), Err(ZeroError::BadMagic));
    }
}
