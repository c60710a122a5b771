//! The agent's metric region: one [`Region`] laid out as [`dta_proto::zero`] describes (control
//! header, descriptors, sealed metric blocks), and the writers that update its blocks.
//!
//! # Layout
//! The control area reserves room for `max_blocks` descriptors when the region is made, so
//! blocks never move and the control area never grows into them: block data starts at
//! `HEADER_LEN + max_blocks × DESC_LEN` (a multiple of 64) and each block starts on a 64-byte
//! boundary (writers of different blocks never share a cache line). Blocks are only ever added,
//! never removed, and a descriptor slot is written once.
//!
//! # Adding a block while readers READ
//! [`AgentRegion::register_array`] (a control-plane call, under a lock) does, in this order:
//! 1. seals the new block at sequence 0 (all values 0), so it verifies from the start;
//! 2. writes its descriptor into the next free slot (zero until then);
//! 3. a release fence, then the header word holding `blocks`;
//! 4. a release fence, then the word holding `generation` (incremented).
//!
//! What a READ of the control area racing this sees: the old `blocks` (the old set, whole and
//! consistent: the new slot lies beyond it), or the new `blocks` with the new descriptor. The
//! software RNIC copies words in address order, so that is all; a real RNIC's DMA orders
//! nothing within one READ, so it may also deliver the new count with words of the descriptor
//! still zero: a zero offset, entries count or kind is refused by
//! [`dta_proto::zero::decode_control`], but a name cut short at an 8-byte boundary is not
//! detectable. In address order a READ can show the new count under the old generation (the
//! next READ shows the new generation), never a new generation over the old count, which a
//! reader keyed on the generation alone would cache; out of order, either. A pull collector
//! therefore re-reads the control area whenever the generation or the count changed since its
//! last read, or a block or the control area failed to decode, and uses a control area when
//! two consecutive reads agree (additions are rare, so this costs one READ now and then).
//!
//! # Block updates
//! One [`ArrayWriter`] per block (not `Clone`; [`ArrayWriter::publish`] takes `&mut self`) updates
//! it in the documented order: `begin` = s + 1 (release store, then a release fence so no value
//! store is seen before it), the sample time and the values, `crc | entries`, `end` = s + 2
//! (release), `begin` = s + 2 (release). The sample time and values are encoded into a buffer
//! the writer owns: nothing allocates per publish.
//!
//! # Sample times
//! Every update carries when its values were taken, on the region's clock ([`AgentClock`]:
//! nanoseconds since the region was made, monotonic, never 0). A pull collector computes rates
//! from these stamps, not from when its READs arrive. [`ArrayWriter::publish`] stamps the
//! update with the time of the call; a sampler that read its source earlier stamps it with that
//! time ([`ArrayWriter::publish_at`], [`AgentRegion::clock`]).

use std::io;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use dta_proto::zero::{
    block_crc, block_len, encode_block, BlockDesc, ControlHeader, MetricKind, BLOCK_CRC_OFFSET,
    BLOCK_HEAD_LEN, BLOCK_SAMPLED_OFFSET, DESC_LEN, HEADER_LEN, MAX_BLOCKS, MAX_ENTRIES, NAME_LEN,
};
use dta_rnic::memory::Region;

/// Alignment of every block (a cache line).
pub const BLOCK_ALIGN: u64 = 64;
/// Descriptor slots a region reserves unless told otherwise.
pub const DEFAULT_MAX_BLOCKS: u16 = 256;
/// Region size unless told otherwise (1 MiB).
pub const DEFAULT_CAPACITY: usize = 1 << 20;

/// Why a block could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionError {
    /// The name is empty, longer than 40 bytes, or holds a NUL byte.
    BadName(String),
    /// Another block already has this name.
    DuplicateName(String),
    /// 0 entries, or more than [`MAX_ENTRIES`].
    BadEntries(u32),
    /// Every descriptor slot is taken.
    TooManyBlocks(u16),
    /// The block does not fit in the space left.
    Full {
        /// Bytes the block needs.
        need: u64,
        /// Bytes left.
        left: u64,
    },
}

impl std::fmt::Display for RegionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionError::BadName(n) => write!(
                f,
                "block name {n:?}: must be 1..={NAME_LEN} bytes of UTF-8 without NUL"
            ),
            RegionError::DuplicateName(n) => write!(f, "a block called {n:?} exists already"),
            RegionError::BadEntries(e) => {
                write!(f, "{e} entries: a block holds 1..={MAX_ENTRIES} values")
            }
            RegionError::TooManyBlocks(m) => {
                write!(f, "the region's {m} descriptor slots are all taken")
            }
            RegionError::Full { need, left } => {
                write!(
                    f,
                    "the region is full: the block needs {need} bytes, {left} left"
                )
            }
        }
    }
}

impl std::error::Error for RegionError {}

/// The longest prefix of `name` that is at most 40 bytes and ends on a character boundary
/// (deterministic: the same name always gives the same result).
pub fn truncate_name(name: &str) -> &str {
    if name.len() <= NAME_LEN {
        return name;
    }
    let mut end = NAME_LEN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// The clock a region's samples are stamped with: nanoseconds since the region was made, on
/// the monotonic clock. Never 0 (0 marks a block never sampled).
#[derive(Debug, Clone, Copy)]
pub struct AgentClock {
    epoch: Instant,
}

impl AgentClock {
    fn new() -> AgentClock {
        AgentClock {
            epoch: Instant::now(),
        }
    }

    /// Now, in nanoseconds since the region was made (at least 1).
    pub fn now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }
}

struct Layout {
    max_blocks: u16,
    blocks: Vec<BlockDesc>,
    generation: u32,
    /// Offset of the next block.
    next: u64,
}

/// A ZERO metric region: the memory a pull collector READs, and its block registry.
///
/// A cheap handle (clones share the region): hand one to the server, one to each sampler.
#[derive(Clone)]
pub struct AgentRegion {
    region: Arc<Region>,
    layout: Arc<Mutex<Layout>>,
    clock: AgentClock,
}

impl std::fmt::Debug for AgentRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRegion")
            .field("region", &self.region)
            .field("blocks", &self.blocks().len())
            .finish()
    }
}

impl AgentRegion {
    /// Maps `capacity` bytes (ordinary pages) with `max_blocks` descriptor slots and writes an
    /// empty control header (no blocks, generation 1).
    pub fn new(capacity: usize, max_blocks: u16) -> io::Result<AgentRegion> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if max_blocks == 0 || max_blocks > MAX_BLOCKS {
            return Err(invalid(format!(
                "max_blocks {max_blocks}: must be 1..={MAX_BLOCKS}"
            )));
        }
        let data = (HEADER_LEN + max_blocks as usize * DESC_LEN) as u64;
        if (capacity as u64) < data + block_len(1) as u64 {
            return Err(invalid(format!(
                "a {capacity}-byte region cannot hold {max_blocks} descriptors and a block"
            )));
        }
        let region = Arc::new(Region::anonymous(capacity, false)?);
        let layout = Layout {
            max_blocks,
            blocks: Vec::new(),
            generation: 1,
            next: data.next_multiple_of(BLOCK_ALIGN),
        };
        let header = ControlHeader {
            blocks: 0,
            generation: layout.generation,
            region_len: capacity as u64,
        };
        region
            .write(0, &header.encode())
            .expect("the header fits the region");
        Ok(AgentRegion {
            region,
            layout: Arc::new(Mutex::new(layout)),
            clock: AgentClock::new(),
        })
    }

    /// The clock every block's samples are stamped with.
    pub fn clock(&self) -> AgentClock {
        self.clock
    }

    /// The memory (what the RNIC registers and a reader READs).
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Virtual address of the region's first byte.
    pub fn addr(&self) -> u64 {
        self.region.addr()
    }

    /// Region length in bytes.
    pub fn len(&self) -> u64 {
        self.region.len() as u64
    }

    /// Never true: a region holds at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The blocks registered so far, in descriptor order.
    pub fn blocks(&self) -> Vec<BlockDesc> {
        self.lock().blocks.clone()
    }

    /// The current generation.
    pub fn generation(&self) -> u32 {
        self.lock().generation
    }

    /// Bytes of the control area as it stands (header and the descriptors in use).
    pub fn control_len(&self) -> usize {
        HEADER_LEN + self.lock().blocks.len() * DESC_LEN
    }

    /// Bytes not yet given to a block.
    pub fn bytes_left(&self) -> u64 {
        self.len().saturating_sub(self.lock().next)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Layout> {
        self.layout.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a block of `entries` values called `name` (at most 40 bytes: see
    /// [`truncate_name`]) and returns its only writer. The block reads as all zeros at
    /// sequence 0, sample time 0, until the first publish. Readers see it after the next
    /// generation change.
    pub fn register_array(
        &self,
        name: &str,
        entries: u32,
        kind: MetricKind,
        interval_ms: u32,
    ) -> Result<ArrayWriter, RegionError> {
        if name.is_empty() || name.len() > NAME_LEN || name.contains('\0') {
            return Err(RegionError::BadName(name.to_string()));
        }
        if entries == 0 || entries > MAX_ENTRIES {
            return Err(RegionError::BadEntries(entries));
        }
        let mut l = self.lock();
        if l.blocks.iter().any(|b| b.name == name) {
            return Err(RegionError::DuplicateName(name.to_string()));
        }
        if l.blocks.len() >= l.max_blocks as usize {
            return Err(RegionError::TooManyBlocks(l.max_blocks));
        }
        let len = block_len(entries) as u64;
        let left = self.len().saturating_sub(l.next);
        if len > left {
            return Err(RegionError::Full { need: len, left });
        }
        let offset = l.next;
        let desc = BlockDesc {
            name: name.to_string(),
            offset,
            entries,
            kind,
            interval_ms,
        };
        let encoded = desc
            .encode()
            .ok_or_else(|| RegionError::BadName(name.to_string()))?;
        // 1. The block, sealed at sequence 0.
        let mut sealed = vec![0u8; len as usize];
        encode_block(0, 0, &vec![0u64; entries as usize], &mut sealed);
        self.region
            .write(offset, &sealed)
            .expect("the block lies inside the region (checked above)");
        // 2. Its descriptor, in a slot no reader has seen anything but zeros in.
        let slot = (HEADER_LEN + l.blocks.len() * DESC_LEN) as u64;
        self.region
            .write(slot, &encoded)
            .expect("descriptor slots lie inside the region");
        l.blocks.push(desc);
        l.generation = l.generation.wrapping_add(1);
        l.next = (offset + len).next_multiple_of(BLOCK_ALIGN);
        let header = ControlHeader {
            blocks: l.blocks.len() as u16,
            generation: l.generation,
            region_len: self.len(),
        }
        .encode();
        // 3. The count, after the descriptor; 4. the generation, after the count.
        fence(Ordering::Release);
        self.region
            .write(0, &header[..8])
            .expect("the header fits the region");
        fence(Ordering::Release);
        self.region
            .write(8, &header[8..])
            .expect("the header fits the region");
        Ok(ArrayWriter {
            region: self.region.clone(),
            clock: self.clock,
            offset,
            seq: 0,
            values: vec![0; entries as usize],
            bytes: vec![0; 8 + 8 * entries as usize],
        })
    }
}

/// The one writer of one block: keeps the values, seals each update so a reader never takes a
/// mix of two for data.
pub struct ArrayWriter {
    region: Arc<Region>,
    clock: AgentClock,
    offset: u64,
    /// Sequence of the last sealed update (even).
    seq: u64,
    values: Vec<u64>,
    /// The sample time and the values as stored (8 LE bytes each), reused by every publish.
    bytes: Vec<u8>,
}

impl std::fmt::Debug for ArrayWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayWriter")
            .field("offset", &self.offset)
            .field("entries", &self.values.len())
            .field("seq", &self.seq)
            .finish()
    }
}

impl ArrayWriter {
    /// Region offset of the block.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Values in the block.
    pub fn entries(&self) -> usize {
        self.values.len()
    }

    /// Bytes of the block (what one READ of it asks for).
    pub fn block_len(&self) -> usize {
        block_len(self.values.len() as u32)
    }

    /// Sequence word of the last update (2 × updates).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The values as last published.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// Sample time of the last update (the region's clock, ns; 0 before the first).
    pub fn sampled_ns(&self) -> u64 {
        u64::from_le_bytes(self.bytes[..8].try_into().expect("8 bytes"))
    }

    /// Publishes `values` as the block's next update, sampled now.
    ///
    /// # Panics
    /// If `values.len()` is not the block's entry count.
    pub fn publish(&mut self, values: &[u64]) {
        let now = self.clock.now_ns();
        self.publish_at(values, now);
    }

    /// Publishes `values` as the block's next update, taken at `sampled_ns` on the region's
    /// clock ([`AgentRegion::clock`]): the time the source was read, which a collector's rates
    /// are computed from.
    ///
    /// # Panics
    /// If `values.len()` is not the block's entry count.
    pub fn publish_at(&mut self, values: &[u64], sampled_ns: u64) {
        assert_eq!(
            values.len(),
            self.values.len(),
            "a block's updates have its entry count"
        );
        self.values.copy_from_slice(values);
        self.seal(sampled_ns);
    }

    /// Lets `f` change the values in place, then publishes them, sampled now.
    pub fn update(&mut self, f: impl FnOnce(&mut [u64])) {
        f(&mut self.values);
        let now = self.clock.now_ns();
        self.seal(now);
    }

    /// Writes the current values, taken at `sampled_ns`, as update `seq + 2`, in the
    /// documented order.
    fn seal(&mut self, sampled_ns: u64) {
        const INSIDE: &str = "the block lies inside the region (checked at registration)";
        let (s, off, n) = (self.seq, self.offset, self.values.len());
        self.region.store_u64_release(off, s + 1).expect(INSIDE);
        // No value store may be seen before `begin` turned odd.
        fence(Ordering::Release);
        self.bytes[..8].copy_from_slice(&sampled_ns.to_le_bytes());
        for (c, v) in self.bytes[8..].chunks_exact_mut(8).zip(&self.values) {
            c.copy_from_slice(&v.to_le_bytes());
        }
        self.region
            .write(off + BLOCK_SAMPLED_OFFSET as u64, &self.bytes)
            .expect(INSIDE);
        let crc = block_crc(s + 2, n as u32, &self.bytes);
        let word = crc as u64 | (n as u64) << 32;
        self.region
            .write(off + BLOCK_CRC_OFFSET as u64, &word.to_le_bytes())
            .expect(INSIDE);
        let end = off + (BLOCK_HEAD_LEN + 8 * n) as u64;
        self.region.store_u64_release(end, s + 2).expect(INSIDE);
        self.region.store_u64_release(off, s + 2).expect(INSIDE);
        self.seq = s + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::zero::{decode_control, verify_block};

    fn read(r: &AgentRegion, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        r.region().read(off, &mut b).unwrap();
        b
    }

    #[test]
    fn blocks_are_described_placed_and_sealed() {
        let r = AgentRegion::new(64 << 10, 8).unwrap();
        let c = read(&r, 0, r.control_len());
        let (h, d) = decode_control(&c).unwrap();
        assert_eq!((h.blocks, h.generation, h.region_len), (0, 1, 64 << 10));
        assert!(d.is_empty());

        let mut a = r
            .register_array("app/a", 3, MetricKind::Counter, 100)
            .unwrap();
        // Sealed at 0 before the first publish.
        let b0 = read(&r, a.offset(), a.block_len());
        let s = verify_block(&b0, 3).unwrap();
        assert_eq!(
            (s.seq, s.sampled_ns, s.iter().collect::<Vec<_>>()),
            (0, 0, vec![0, 0, 0])
        );
        let before = r.clock().now_ns();
        a.publish(&[1, 2, 3]);
        a.update(|v| v[2] += 10);
        let after = r.clock().now_ns();
        let b1 = read(&r, a.offset(), a.block_len());
        let s = verify_block(&b1, 3).unwrap();
        assert_eq!((s.seq, s.iter().collect::<Vec<_>>()), (4, vec![1, 2, 13]));
        assert!(
            (before..=after).contains(&s.sampled_ns),
            "stamped when published"
        );
        assert_eq!(a.sampled_ns(), s.sampled_ns);
        a.publish_at(&[4, 5, 6], 123_456_789);
        let b2 = read(&r, a.offset(), a.block_len());
        let s = verify_block(&b2, 3).unwrap();
        assert_eq!((s.seq, s.sampled_ns), (6, 123_456_789));

        let g = r.register_array("app/b", 1, MetricKind::Gauge, 5).unwrap();
        let c = read(&r, 0, r.control_len());
        let (h, d) = decode_control(&c).unwrap();
        assert_eq!((h.blocks, h.generation), (2, 3));
        assert_eq!(d[0].name, "app/a");
        assert_eq!((d[1].offset, d[1].entries), (g.offset(), 1));
        assert_eq!(d[1].kind, MetricKind::Gauge);
        assert_eq!(g.offset() % BLOCK_ALIGN, 0);
        assert!(d[0].offset >= (HEADER_LEN + 8 * DESC_LEN) as u64);
    }

    #[test]
    fn bad_registrations_are_refused_and_change_nothing() {
        let r = AgentRegion::new(HEADER_LEN + 2 * DESC_LEN + 256, 2).unwrap();
        let k = MetricKind::Counter;
        for bad in ["", "a\0b", &"x".repeat(41)] {
            assert!(matches!(
                r.register_array(bad, 1, k, 1),
                Err(RegionError::BadName(_))
            ));
        }
        assert_eq!(
            r.register_array("z", 0, k, 1).unwrap_err(),
            RegionError::BadEntries(0)
        );
        assert!(matches!(
            r.register_array("big", 100, k, 1),
            Err(RegionError::Full { .. })
        ));
        r.register_array("a", 1, k, 1).unwrap();
        assert!(matches!(
            r.register_array("a", 1, k, 1),
            Err(RegionError::DuplicateName(_))
        ));
        r.register_array("b", 1, k, 1).unwrap();
        assert_eq!(
            r.register_array("c", 1, k, 1).unwrap_err(),
            RegionError::TooManyBlocks(2)
        );
        assert_eq!((r.blocks().len(), r.generation()), (2, 3));
        assert!(AgentRegion::new(100, 4).is_err());
        assert!(AgentRegion::new(1 << 20, 0).is_err());
    }

    #[test]
    fn names_are_truncated_on_a_character_boundary() {
        assert_eq!(truncate_name("net/eth0"), "net/eth0");
        let long = format!("net/{}", "é".repeat(30));
        let t = truncate_name(&long);
        assert!(t.len() <= NAME_LEN && long.starts_with(t));
        assert_eq!(t.len(), 40);
        // 5 + 11 × 3 = 38: a 12th euro sign would end at byte 41.
        let odd = format!("net/x{}", "€".repeat(20));
        assert_eq!(truncate_name(&odd).len(), 38);
    }
}
