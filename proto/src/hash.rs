//! Hash profiles: where a key's replicas land, which checksum guards them, and how Postcarding
//! hop values are encoded.
//!
//! Two profiles exist, and translator, collector and the Tofino program must agree on one per
//! store:
//!
//! - [`HashProfile::Reference`] is bit-for-bit the authors' Tofino artefact (reference §3.3,
//!   §3.6): one IEEE CRC-32 for everything, with the replica number appended as a byte. CRC-32 is
//!   affine over GF(2) for fixed-length inputs, so `CRC(k ‖ n1) XOR CRC(k ‖ n2)` does not depend
//!   on `k`: every key's N slots sit at the same XOR offsets from its slot 0, one later key can
//!   overwrite all of them at once, and redundancy *raises* the empty-return rate (§11.6;
//!   `tests/redundancy.rs` measures it). Keep it only for compatibility.
//! - [`HashProfile::Independent`] (the default) gives the checksum, each replica slot, the
//!   Postcarding cache index and each Postcarding hop checksum its own irreducible polynomial
//!   from [`POLYNOMIALS`], which is what the papers' analysis assumes.
//!
//! Every CRC here is reflected with init and final XOR `0xFFFF_FFFF` ([`crate::crc`]).
//! The engines are `static`, built at compile time; hashing allocates nothing.

use std::sync::LazyLock;

use crate::crc::fold::{BlockKeys, Clmul};
use crate::crc::{length_bases, Crc32, MultiCrc, ShortCrc, CRC_INIT, IEEE, LANES, MULTI_MAX_LEN};
use crate::types::Key;

/// Which family of hash functions a store uses.
#[derive(serde::Deserialize, serde::Serialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum HashProfile {
    /// Bit-for-bit the reference Tofino artefact (IEEE CRC-32, replica number appended).
    Reference,
    /// One independent CRC polynomial per role and per replica (the papers' design).
    #[default]
    Independent,
}

/// Most replicas (N) a Key-Write / Key-Increment / Postcarding store supports.
pub const MAX_REDUNDANCY: usize = 8;
/// Most hops a Postcarding chunk holds.
pub const MAX_HOPS: usize = 16;

/// The independent profile's polynomials (normal form, x^32 implied).
///
/// Generated deterministically so anyone can regenerate and audit them: splitmix64 seeded with
/// `0x0D7A_2023`; each output's low 32 bits, with bit 0 forced to 1, is kept if it is
/// irreducible over GF(2), has 12..=20 coefficients set (in the low 32 bits) and is new. The
/// unit tests redo the generation and the irreducibility test. Roles: [`CHECKSUM_POLY_INDEX`],
/// [`REPLICA_POLY_BASE`], [`CACHE_POLY_INDEX`], [`HOP_POLY_BASE`]; the last six are spares.
#[rustfmt::skip]
pub static POLYNOMIALS: [u32; 32] = [
    // [0] checksum
    0x5D9E_2BB1,
    // [1..9] replica slot / chunk, n = 0..8
    0x27FF_F503, 0xECB3_5CDB, 0xB71B_5C39, 0x7041_E0BD,
    0x5099_5333, 0xDC5B_787B, 0x72E7_96F3, 0x3184_A239,
    // [9] Postcarding cache index
    0xEED6_2101,
    // [10..26] Postcarding hop checksum, hop i = 0..16
    0x49D8_098F, 0xD665_6329, 0x2CA7_936F, 0x0021_FA99,
    0x0B4E_F00D, 0x3FE4_F4CD, 0x728F_5B95, 0xD9F1_9A35,
    0xF214_82B9, 0x21E9_8F05, 0x6835_4A4B, 0x047A_287B,
    0xA9EB_B53B, 0x7671_F82D, 0xD1AC_00D1, 0x9D1D_4DDF,
    // [26..32] spare
    0x243B_1A27, 0xC2AE_594B, 0xE480_6F45, 0x56DD_1405,
    0xFE42_F623, 0x41F4_2BA7,
];

/// Index in [`POLYNOMIALS`] of the Key-Write / Key-Increment checksum polynomial.
pub const CHECKSUM_POLY_INDEX: usize = 0;
/// Index in [`POLYNOMIALS`] of replica 0's slot (or chunk) polynomial; replica n uses base + n.
pub const REPLICA_POLY_BASE: usize = 1;
/// Index in [`POLYNOMIALS`] of the Postcarding translator-cache index polynomial.
pub const CACHE_POLY_INDEX: usize = REPLICA_POLY_BASE + MAX_REDUNDANCY;
/// Index in [`POLYNOMIALS`] of Postcarding hop 0's checksum polynomial; hop i uses base + i.
pub const HOP_POLY_BASE: usize = CACHE_POLY_INDEX + 1;

/// The checksum polynomial of the independent profile.
pub const CHECKSUM_POLY: u32 = POLYNOMIALS[CHECKSUM_POLY_INDEX];
/// The Postcarding cache-index polynomial of the independent profile.
pub const CACHE_POLY: u32 = POLYNOMIALS[CACHE_POLY_INDEX];

/// The independent profile's slot (Key-Write, Key-Increment) or chunk (Postcarding) polynomial
/// of replica `n` (< [`MAX_REDUNDANCY`]).
pub const fn replica_poly(n: usize) -> u32 {
    assert!(n < MAX_REDUNDANCY);
    POLYNOMIALS[REPLICA_POLY_BASE + n]
}

/// The independent profile's Postcarding checksum polynomial of hop `i` (0-based, < [`MAX_HOPS`]).
pub const fn hop_poly(i: usize) -> u32 {
    assert!(i < MAX_HOPS);
    POLYNOMIALS[HOP_POLY_BASE + i]
}

/// The reference Postcarding hop-hash polynomials, hops 1..5 (§3.6; some lack the x^0 term).
pub const REFERENCE_HOP_POLYNOMIALS: [u32; 5] = [
    0x1E12_A700,
    0x65B9_6595,
    0x49CF_878B,
    0x3651_8F0D,
    0x7A40_A908,
];

/// The independent profile's blank-hop marker ⊔: a blank hop is stored checksum-protected as
/// `h_i(flow) XOR BLANK`, so a value equal to `BLANK` cannot be represented.
pub const BLANK: u32 = 0xFFFF_FFFF;

const fn engines<const N: usize>(polys: &[u32]) -> [Crc32; N] {
    const UNUSED: Crc32 = Crc32::new(0);
    let mut out = [UNUSED; N];
    let mut i = 0;
    while i < N {
        out[i] = Crc32::new(polys[i]);
        i += 1;
    }
    out
}

/// Engines for every used entry of [`POLYNOMIALS`] (the six spares get none).
static ENGINES: [Crc32; HOP_POLY_BASE + MAX_HOPS] = engines(&POLYNOMIALS);
static REFERENCE_HOP_ENGINES: [Crc32; 5] = engines(&REFERENCE_HOP_POLYNOMIALS);

/// Key-Write / Key-Increment (independent profile), one pass: lane 0 the checksum, lane 1 + r
/// replica r's slot function (r < 3; further replicas use their own engines). Four lanes keep
/// a table row at 16 bytes, one vector XOR per key byte.
static KEY_LANES: LazyLock<MultiCrc<KEY_LANE_COUNT, { KEY_LANE_COUNT / 2 }>> =
    LazyLock::new(|| {
        MultiCrc::new(&POLYNOMIALS[CHECKSUM_POLY_INDEX..CHECKSUM_POLY_INDEX + KEY_LANE_COUNT])
    });
const KEY_LANE_COUNT: usize = 4;
/// Replicas [`KEY_LANES`] covers.
const KEY_LANE_REPLICAS: usize = KEY_LANE_COUNT - 1;
const _: () = assert!(CHECKSUM_POLY_INDEX + 1 == REPLICA_POLY_BASE);

/// Carry-less multiply constants of several polynomials for keys of at most 16 bytes held
/// behind zeros in a 16-byte block ([`Clmul::block_regs`]), and each polynomial's share of the
/// initial register by key length: the CRC of a `len`-byte key is `base[len]` XOR the
/// register of its padded block from zero (the register is linear in the input, and leading
/// zeros leave a zero register unchanged). Built at compile time.
struct BlockLanes<const N: usize> {
    keys: [BlockKeys; N],
    base: [[u32; MULTI_MAX_LEN + 1]; N],
}

impl<const N: usize> BlockLanes<N> {
    /// Lanes for `polys[first..first + N]`.
    const fn new(polys: &[u32], first: usize) -> BlockLanes<N> {
        let mut keys = [BlockKeys::new(0); N];
        let mut base = [[0u32; MULTI_MAX_LEN + 1]; N];
        let mut i = 0;
        while i < N {
            keys[i] = BlockKeys::new(polys[first + i]);
            base[i] = length_bases(polys[first + i]);
            i += 1;
        }
        BlockLanes { keys, base }
    }
}

/// Key-Write / Key-Increment (independent profile) by carry-less multiplication: lane 0 the
/// checksum, lane 1 + r replica r's slot function, for every replica.
static KEY_BLOCK_LANES: BlockLanes<{ 1 + MAX_REDUNDANCY }> =
    BlockLanes::new(&POLYNOMIALS, CHECKSUM_POLY_INDEX);

/// Postcarding (independent profile), one pass: lanes 0..2 chunk replicas 0 and 1, lanes
/// 2.. hops 0..6.
static POSTCARD_LANES: LazyLock<MultiCrc> = LazyLock::new(|| {
    let mut p = vec![
        POLYNOMIALS[REPLICA_POLY_BASE],
        POLYNOMIALS[REPLICA_POLY_BASE + 1],
    ];
    p.extend_from_slice(&POLYNOMIALS[HOP_POLY_BASE..HOP_POLY_BASE + POSTCARD_LANE_HOPS]);
    MultiCrc::new(&p)
});
const POSTCARD_LANE_REPLICAS: usize = 2;
const POSTCARD_LANE_HOPS: usize = LANES - POSTCARD_LANE_REPLICAS;

/// The Postcarding cache index of the independent profile ([`ShortCrc`]: sixteen independent
/// table loads, where a table-driven CRC chains a load per step). It is computed for every
/// postcard, so its latency is on the hot path.
static CACHE_LANE: LazyLock<ShortCrc> =
    LazyLock::new(|| ShortCrc::new(POLYNOMIALS[CACHE_POLY_INDEX]));

/// The reference profile's cache index (IEEE), likewise.
static REFERENCE_CACHE_LANE: LazyLock<ShortCrc> = LazyLock::new(|| ShortCrc::new(IEEE.poly()));

/// Postcarding (reference profile), one pass: lane 0 the IEEE CRC (cache and chunks), lanes
/// 1..6 the five hop polynomials.
static REFERENCE_POSTCARD_LANES: LazyLock<MultiCrc> = LazyLock::new(|| {
    let mut p = vec![IEEE.poly()];
    p.extend_from_slice(&REFERENCE_HOP_POLYNOMIALS);
    MultiCrc::new(&p)
});

/// What emitting a flow's chunk needs: its hop hashes and chunk indices, computed together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowDigest {
    /// [`PostcardHasher::hop_hash`] of hops `0..hops`.
    pub hop: [u32; MAX_HOPS],
    /// [`PostcardHasher::chunk`] of the requested replicas.
    pub chunk: [u32; MAX_REDUNDANCY],
}

/// Validates a power-of-two table size in `min..=2^31` and returns its mask.
#[inline]
fn pow2_mask(n: u32, min: u32) -> Option<u32> {
    (n >= min && n.is_power_of_two()).then(|| n - 1)
}

/// Slot and checksum functions of one Key-Write or Key-Increment store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHasher {
    profile: HashProfile,
    mask: u32,
}

impl KeyHasher {
    /// A hasher for a store of `slots` slots (a power of two, 2..=2^31, like the reference's
    /// mask table); `None` otherwise.
    pub fn new(profile: HashProfile, slots: u32) -> Option<Self> {
        Some(KeyHasher {
            profile,
            mask: pow2_mask(slots, 2)?,
        })
    }

    /// The profile.
    #[inline]
    pub fn profile(&self) -> HashProfile {
        self.profile
    }

    /// Number of slots in the store.
    #[inline]
    pub fn slot_count(&self) -> u32 {
        self.mask + 1
    }

    /// The 32-bit checksum stored next to the key's value.
    #[inline]
    pub fn checksum(&self, key: &Key) -> u32 {
        match self.profile {
            HashProfile::Reference => IEEE.checksum(key.as_bytes()),
            HashProfile::Independent => ENGINES[CHECKSUM_POLY_INDEX].checksum(key.as_bytes()),
        }
    }

    /// Slot of replica `replica` (0-based).
    ///
    /// # Panics
    /// If `replica >= MAX_REDUNDANCY` (callers validate N when they parse a report).
    #[inline]
    pub fn slot(&self, key: &Key, replica: u8) -> u32 {
        assert!((replica as usize) < MAX_REDUNDANCY, "replica out of range");
        let h = match self.profile {
            HashProfile::Reference => {
                Crc32::finish(IEEE.update_byte(IEEE.update(CRC_INIT, key.as_bytes()), replica))
            }
            HashProfile::Independent => {
                ENGINES[REPLICA_POLY_BASE + replica as usize].checksum(key.as_bytes())
            }
        };
        h & self.mask
    }

    /// Writes the slots of replicas `0..n` into `out[..n]` (the per-report hot path).
    ///
    /// # Panics
    /// If `n > MAX_REDUNDANCY`.
    #[inline]
    pub fn slots(&self, key: &Key, n: usize, out: &mut [u32; MAX_REDUNDANCY]) {
        assert!(n <= MAX_REDUNDANCY, "redundancy out of range");
        let bytes = key.as_bytes();
        match self.profile {
            HashProfile::Reference => {
                self.reference_slots(IEEE.update(CRC_INIT, bytes), n, out);
            }
            HashProfile::Independent => {
                self.independent(key, n, out, false);
            }
        }
    }

    /// Independent profile: the replicas' slots, and the checksum if `checksum` (else 0). For
    /// keys over 8 bytes by carry-less multiplication when the CPU has it (three multiplies per
    /// polynomial, only for the replicas and the checksum asked for), else by the table lanes;
    /// both give the same values (property test).
    #[inline(always)]
    fn independent(
        &self,
        key: &Key,
        n: usize,
        out: &mut [u32; MAX_REDUNDANCY],
        checksum: bool,
    ) -> u32 {
        let c = Clmul::detect();
        // Keys of at most 8 bytes (the reference profile's) fold only eight table rows: the
        // tables take less time there (paired wall clock 0.96 with multiplies), though more
        // instructions.
        if c.is_native() && key.len() > 8 {
            return self.independent_clmul(c, key, n, out, checksum);
        }
        let sum = self.independent_tables(key, n, out);
        if checksum {
            sum
        } else {
            0
        }
    }

    /// [`KeyHasher::independent`] by [`Clmul::block_regs`] (`c` native or portable).
    #[inline(always)]
    fn independent_clmul(
        &self,
        c: Clmul,
        key: &Key,
        n: usize,
        out: &mut [u32; MAX_REDUNDANCY],
        checksum: bool,
    ) -> u32 {
        let lanes = &KEY_BLOCK_LANES;
        let mut regs = [0u32; 1 + MAX_REDUNDANCY];
        let first = usize::from(!checksum);
        c.block_regs(&lanes.keys[first..n + 1], key.padded(), &mut regs[first..]);
        let len = key.len();
        for (r, o) in out[..n].iter_mut().enumerate() {
            *o = (regs[1 + r] ^ lanes.base[1 + r][len]) & self.mask;
        }
        if checksum {
            regs[0] ^ lanes.base[0][len]
        } else {
            0
        }
    }

    /// [`KeyHasher::independent`] by the table lanes (the portable path): one pass for the
    /// checksum and three replicas, further replicas by their own engines.
    #[inline(never)]
    fn independent_tables(&self, key: &Key, n: usize, out: &mut [u32; MAX_REDUNDANCY]) -> u32 {
        let lanes = KEY_LANES.checksums_padded(key.padded(), key.len());
        let bytes = key.as_bytes();
        for (r, o) in out[..n].iter_mut().enumerate() {
            *o = if r < KEY_LANE_REPLICAS {
                lanes[1 + r]
            } else {
                ENGINES[REPLICA_POLY_BASE + r].checksum(bytes)
            } & self.mask;
        }
        lanes[0]
    }

    /// The reference profile's replica slots from the CRC register over the key.
    #[inline]
    fn reference_slots(&self, reg: u32, n: usize, out: &mut [u32; MAX_REDUNDANCY]) {
        for (r, o) in out[..n].iter_mut().enumerate() {
            *o = Crc32::finish(IEEE.update_byte(reg, r as u8)) & self.mask;
        }
    }

    /// [`KeyHasher::slots`] and also returns [`KeyHasher::checksum`]; the reference profile
    /// shares one CRC register over the key between them.
    ///
    /// # Panics
    /// If `n > MAX_REDUNDANCY`.
    #[inline(always)]
    pub fn checksum_and_slots(&self, key: &Key, n: usize, out: &mut [u32; MAX_REDUNDANCY]) -> u32 {
        match self.profile {
            HashProfile::Reference => {
                assert!(n <= MAX_REDUNDANCY, "redundancy out of range");
                let reg = IEEE.update(CRC_INIT, key.as_bytes());
                self.reference_slots(reg, n, out);
                Crc32::finish(reg)
            }
            HashProfile::Independent => {
                assert!(n <= MAX_REDUNDANCY, "redundancy out of range");
                self.independent(key, n, out, true)
            }
        }
    }
}

/// A decoded Postcarding hop word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HopWord {
    /// The hop was not collected (path shorter than the chunk, or never written in the
    /// reference profile).
    Blank,
    /// A decoded value; the caller still checks that it belongs to the value set V, since an
    /// overwritten or never-written chunk decodes to pseudo-random values.
    Value(u32),
}

/// Cache, chunk and hop-encoding functions of one Postcarding store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostcardHasher {
    profile: HashProfile,
    chunk_mask: u32,
    cache_mask: u32,
    hops: u8,
}

impl PostcardHasher {
    /// A hasher for `chunks` collector chunks (power of two, 2..=2^31), a translator cache of
    /// `cache_slots` entries (power of two, 1..=2^31) and paths of up to `hops` hops (1..=16;
    /// the reference profile has exactly 5). `None` if any is out of range.
    pub fn new(profile: HashProfile, chunks: u32, cache_slots: u32, hops: u8) -> Option<Self> {
        let hops_ok = match profile {
            HashProfile::Reference => hops as usize == REFERENCE_HOP_POLYNOMIALS.len(),
            HashProfile::Independent => (1..=MAX_HOPS).contains(&(hops as usize)),
        };
        hops_ok.then_some(())?;
        Some(PostcardHasher {
            profile,
            chunk_mask: pow2_mask(chunks, 2)?,
            cache_mask: pow2_mask(cache_slots, 1)?,
            hops,
        })
    }

    /// The same hasher for a translator cache of `cache_slots` entries (a power of two,
    /// 1..=2^31); `None` otherwise.
    pub fn with_cache_slots(&self, cache_slots: u32) -> Option<Self> {
        Some(PostcardHasher {
            cache_mask: pow2_mask(cache_slots, 1)?,
            ..*self
        })
    }

    /// The profile.
    #[inline]
    pub fn profile(&self) -> HashProfile {
        self.profile
    }

    /// Hops per chunk.
    #[inline]
    pub fn hops(&self) -> u8 {
        self.hops
    }

    /// Number of collector chunks.
    #[inline]
    pub fn chunk_count(&self) -> u32 {
        self.chunk_mask + 1
    }

    /// Number of translator cache entries.
    #[inline]
    pub fn cache_slots(&self) -> u32 {
        self.cache_mask + 1
    }

    /// The translator cache entry of flow `key`.
    ///
    /// Reference: IEEE CRC-32 of the flow bytes, low-order bits kept (§3.6 leaves which bits
    /// Tofino keeps unverified; we assume the low ones).
    #[inline(always)]
    pub fn cache_index(&self, key: &Key) -> u32 {
        let lane = match self.profile {
            HashProfile::Reference => &REFERENCE_CACHE_LANE,
            HashProfile::Independent => &CACHE_LANE,
        };
        lane.checksum_padded(key.padded(), key.len()) & self.cache_mask
    }

    /// The collector chunk of replica `replica` of flow `key`.
    ///
    /// Reference: replica 0 is the artefact's IEEE CRC-32 of the flow bytes. The artefact has
    /// no Postcarding redundancy; replicas n ≥ 1 are our extension and hash `flow ‖ n` as the
    /// reference Key-Write does (so they share its XOR-offset defect).
    ///
    /// # Panics
    /// If `replica >= MAX_REDUNDANCY`.
    #[inline]
    pub fn chunk(&self, key: &Key, replica: u8) -> u32 {
        assert!((replica as usize) < MAX_REDUNDANCY, "replica out of range");
        let bytes = key.as_bytes();
        let h = match self.profile {
            HashProfile::Reference if replica == 0 => IEEE.checksum(bytes),
            HashProfile::Reference => {
                Crc32::finish(IEEE.update_byte(IEEE.update(CRC_INIT, bytes), replica))
            }
            HashProfile::Independent => {
                ENGINES[REPLICA_POLY_BASE + replica as usize].checksum(bytes)
            }
        };
        h & self.chunk_mask
    }

    /// The checksum of flow `key` at hop `hop` (0-based) that hop words are XORed with.
    ///
    /// # Panics
    /// If `hop >= self.hops()`.
    #[inline]
    pub fn hop_hash(&self, key: &Key, hop: usize) -> u32 {
        assert!(hop < self.hops as usize, "hop out of range");
        let engine = match self.profile {
            HashProfile::Reference => &REFERENCE_HOP_ENGINES[hop],
            HashProfile::Independent => &ENGINES[HOP_POLY_BASE + hop],
        };
        engine.checksum(key.as_bytes())
    }

    /// The hop hashes of every hop and the chunks of replicas `0..replicas`, in one pass over
    /// the key where the profile allows (see [`FlowDigest`]).
    ///
    /// # Panics
    /// If `replicas > MAX_REDUNDANCY`.
    #[inline(always)]
    pub fn digest(&self, key: &Key, replicas: usize) -> FlowDigest {
        assert!(replicas <= MAX_REDUNDANCY, "replica out of range");
        let hops = self.hops as usize;

        let mut d = FlowDigest {
            hop: [0; MAX_HOPS],
            chunk: [0; MAX_REDUNDANCY],
        };
        match self.profile {
            HashProfile::Reference => {
                let lanes = REFERENCE_POSTCARD_LANES.checksums_padded(key.padded(), key.len());
                d.hop[..hops].copy_from_slice(&lanes[1..1 + hops]);
                let reg = !lanes[0];
                for (r, c) in d.chunk[..replicas].iter_mut().enumerate() {
                    *c = if r == 0 {
                        lanes[0]
                    } else {
                        Crc32::finish(IEEE.update_byte(reg, r as u8))
                    } & self.chunk_mask;
                }
            }
            HashProfile::Independent
                if hops <= POSTCARD_LANE_HOPS && replicas <= POSTCARD_LANE_REPLICAS =>
            {
                let lanes = POSTCARD_LANES.checksums_padded(key.padded(), key.len());
                for (r, c) in d.chunk[..replicas].iter_mut().enumerate() {
                    *c = lanes[r] & self.chunk_mask;
                }
                d.hop[..hops].copy_from_slice(&lanes[POSTCARD_LANE_REPLICAS..][..hops]);
            }
            HashProfile::Independent => {
                for (h, x) in d.hop[..hops].iter_mut().enumerate() {
                    *x = self.hop_hash(key, h);
                }
                for (r, c) in d.chunk[..replicas].iter_mut().enumerate() {
                    *c = self.chunk(key, r as u8);
                }
            }
        }
        d
    }

    /// [`encode`](Self::encode) from the hop's hash (e.g. a [`FlowDigest`] entry).
    #[inline]
    pub fn encode_word(&self, hop_hash: u32, value: u32) -> Option<[u8; 4]> {
        let word = hop_hash ^ value;
        let representable = match self.profile {
            HashProfile::Reference => word != 0,
            HashProfile::Independent => value != BLANK,
        };
        representable.then(|| word.to_be_bytes())
    }

    /// [`encode_blank`](Self::encode_blank) from the hop's hash.
    #[inline]
    pub fn blank_word(&self, hop_hash: u32) -> [u8; 4] {
        match self.profile {
            HashProfile::Reference => [0; 4],
            HashProfile::Independent => (hop_hash ^ BLANK).to_be_bytes(),
        }
    }

    /// Memory bytes of hop `hop` carrying `value`, or `None` if `value` would read back as
    /// [`HopWord::Blank`]: in the independent profile that is `value == BLANK`; in the
    /// reference profile it is `value == hop_hash(key, hop)` (which encodes to the raw zero a
    /// blank hop also is, so `encode(..).unwrap_or(encode_blank(..))` stays bit-exact with the
    /// artefact).
    ///
    /// Reference: `(value XOR H_hop(flow))` big-endian. Independent: `(h_hop(flow) XOR g(v))`
    /// big-endian with `g` the identity.
    ///
    /// # Panics
    /// If `hop >= self.hops()`.
    #[inline]
    pub fn encode(&self, key: &Key, hop: usize, value: u32) -> Option<[u8; 4]> {
        self.encode_word(self.hop_hash(key, hop), value)
    }

    /// Memory bytes of a blank hop ⊔: raw zero in the reference profile, `h_hop(flow) XOR
    /// BLANK` in the independent one (so blanks are checksum-protected too).
    ///
    /// # Panics
    /// If `hop >= self.hops()`.
    #[inline]
    pub fn encode_blank(&self, key: &Key, hop: usize) -> [u8; 4] {
        match self.profile {
            HashProfile::Reference => {
                assert!(hop < self.hops as usize, "hop out of range");
                [0; 4]
            }
            HashProfile::Independent => (self.hop_hash(key, hop) ^ BLANK).to_be_bytes(),
        }
    }

    /// Decodes the memory bytes of hop `hop` as flow `key` would have written them.
    ///
    /// # Panics
    /// If `hop >= self.hops()`.
    #[inline]
    pub fn decode(&self, key: &Key, hop: usize, word: [u8; 4]) -> HopWord {
        let raw = u32::from_be_bytes(word);
        match self.profile {
            HashProfile::Reference => {
                let h = self.hop_hash(key, hop);
                if raw == 0 {
                    HopWord::Blank
                } else {
                    HopWord::Value(raw ^ h)
                }
            }
            HashProfile::Independent => match raw ^ self.hop_hash(key, hop) {
                BLANK => HopWord::Blank,
                v => HopWord::Value(v),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ---- GF(2) polynomial arithmetic for auditing POLYNOMIALS ----

    /// a·b mod f, with a, b of degree < 32 and f = x^32 + p.
    fn mulmod(mut a: u64, mut b: u64, f: u64) -> u64 {
        let mut r = 0;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            b >>= 1;
            a <<= 1;
            if a & (1 << 32) != 0 {
                a ^= f;
            }
        }
        r
    }

    fn degree(a: u64) -> u32 {
        63 - a.leading_zeros()
    }

    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            while a != 0 && degree(a) >= degree(b) {
                a ^= b << (degree(a) - degree(b));
            }
            core::mem::swap(&mut a, &mut b);
        }
        a
    }

    /// Rabin's test for degree 32 (the only prime dividing 32 is 2):
    /// x^(2^32) ≡ x (mod f) and gcd(x^(2^16) − x, f) = 1.
    fn irreducible(p: u32) -> bool {
        let f = (1u64 << 32) | p as u64;
        let x = 2u64;
        let mut y = x;
        for _ in 0..16 {
            y = mulmod(y, y, f);
        }
        let coprime = gcd(f, y ^ x) == 1;
        for _ in 0..16 {
            y = mulmod(y, y, f);
        }
        coprime && y == x
    }

    #[test]
    fn rabin_test_sanity() {
        // IEEE CRC-32's polynomial is irreducible; Castagnoli's CRC-32C has the factor (x + 1);
        // x^32 + 1 = (x + 1)^32 and x^32 are not irreducible either.
        assert!(irreducible(0x04C1_1DB7));
        assert!(irreducible(0x0000_008D));
        assert!(!irreducible(0x1EDC_6F41));
        assert!(!irreducible(0x0000_0001));
        assert!(!irreducible(0x0000_0000));
    }

    #[test]
    fn polynomials_are_irreducible_and_distinct() {
        for (i, &p) in POLYNOMIALS.iter().enumerate() {
            assert!(irreducible(p), "POLYNOMIALS[{i}] = {p:#010x} is reducible");
            assert!(
                (12..=20).contains(&p.count_ones()),
                "weight of POLYNOMIALS[{i}]"
            );
            assert_ne!(p, 0x04C1_1DB7);
            for &q in &POLYNOMIALS[..i] {
                assert_ne!(p, q);
            }
        }
        for &p in &REFERENCE_HOP_POLYNOMIALS {
            assert!(!POLYNOMIALS.contains(&p));
        }
    }

    #[test]
    fn polynomials_regenerate_from_seed() {
        let mut state: u64 = 0x0D7A_2023;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let mut got = Vec::new();
        while got.len() < POLYNOMIALS.len() {
            let p = (next() as u32) | 1;
            if (12..=20).contains(&p.count_ones()) && irreducible(p) && !got.contains(&p) {
                got.push(p);
            }
        }
        assert_eq!(got, POLYNOMIALS);
    }

    #[test]
    fn roles_are_disjoint() {
        assert_eq!(CHECKSUM_POLY_INDEX, 0);
        assert_eq!(REPLICA_POLY_BASE, 1);
        assert_eq!(CACHE_POLY_INDEX, 9);
        assert_eq!(HOP_POLY_BASE, 10);
        assert!(HOP_POLY_BASE + MAX_HOPS <= POLYNOMIALS.len());
        for (i, e) in ENGINES.iter().enumerate() {
            assert_eq!(e.poly(), POLYNOMIALS[i]);
        }
        assert_eq!((CHECKSUM_POLY, CACHE_POLY), (0x5D9E_2BB1, 0xEED6_2101));
        assert_eq!(
            (replica_poly(0), replica_poly(7)),
            (0x27FF_F503, 0x3184_A239)
        );
        assert_eq!((hop_poly(0), hop_poly(15)), (0x49D8_098F, 0x9D1D_4DDF));
    }

    // ---- §3.10 test vectors ----

    #[test]
    fn reference_keywrite_vectors() {
        let h = KeyHasher::new(HashProfile::Reference, 256).unwrap();
        let table: [(u32, u32, [u32; 4], [u32; 4]); 4] = [
            (
                0,
                0x2144_DF1C,
                [0xC622_F71D, 0xB125_C78B, 0x282C_9631, 0x5F2B_A6A7],
                [29, 139, 49, 167],
            ),
            (
                1,
                0x99F8_B879,
                [0xFB42_DEAD, 0x8C45_EE3B, 0x154C_BF81, 0x624B_8F17],
                [173, 59, 129, 23],
            ),
            (
                2,
                0x8B4D_1797,
                [0xBCE2_A47D, 0xCBE5_94EB, 0x52EC_C551, 0x25EB_F5C7],
                [125, 235, 81, 199],
            ),
            (
                0x0A00_0001,
                0x792D_5167,
                [0x01AD_3627, 0x76AA_06B1, 0xEFA3_570B, 0x98A4_679D],
                [39, 177, 11, 157],
            ),
        ];
        for (k, checksum, raw, slots) in table {
            let key = Key::from_u32_reference(k);
            assert_eq!(h.checksum(&key), checksum, "checksum of {k:#x}");
            let mut out = [0; MAX_REDUNDANCY];
            assert_eq!(h.checksum_and_slots(&key, 4, &mut out), checksum);
            for n in 0..4u8 {
                let mut buf = [0u8; 5];
                buf[..4].copy_from_slice(key.as_bytes());
                buf[4] = n;
                assert_eq!(
                    IEEE.checksum(&buf),
                    raw[n as usize],
                    "raw CRC of {k:#x} ‖ {n}"
                );
                assert_eq!(
                    h.slot(&key, n),
                    slots[n as usize],
                    "slot of {k:#x}, n = {n}"
                );
                assert_eq!(out[n as usize], slots[n as usize]);
            }
            // The artefact's full-width hash is what the mask is applied to.
            let wide = KeyHasher::new(HashProfile::Reference, 1 << 31).unwrap();
            assert_eq!(wide.slot(&key, 1), raw[1] & 0x7FFF_FFFF);
        }
    }

    #[test]
    fn reference_postcard_vectors() {
        let h = PostcardHasher::new(HashProfile::Reference, 256, 1 << 15, 5).unwrap();
        let table: [(u32, u32, u32, [u32; 5]); 2] = [
            (
                0x0000_0001,
                28554,
                138,
                [
                    0xFFFD_D680,
                    0x119C_A20C,
                    0x55F9_52F3,
                    0xF4B8_DA4A,
                    0xFE06_C36C,
                ],
            ),
            (
                0x0102_0304,
                31693,
                205,
                [
                    0xFF2C_2AFD,
                    0x8158_4F40,
                    0x8B43_F04B,
                    0x97AB_CF80,
                    0xE4F8_9219,
                ],
            ),
        ];
        for (flow, cache, slot, hs) in table {
            let key = Key::new(&flow.to_be_bytes()).unwrap();
            assert_eq!(h.cache_index(&key), cache);
            assert_eq!(h.chunk(&key, 0), slot);
            for (i, &hv) in hs.iter().enumerate() {
                assert_eq!(h.hop_hash(&key, i), hv, "H{} of {flow:#x}", i + 1);
                // The artefact XORs the big-endian value with the big-endian hash.
                let v = 0x0A0B_0C0D;
                assert_eq!(h.encode(&key, i, v), Some((v ^ hv).to_be_bytes()));
                assert_eq!(h.decode(&key, i, (v ^ hv).to_be_bytes()), HopWord::Value(v));
                assert_eq!(h.encode_blank(&key, i), [0; 4]);
                assert_eq!(h.decode(&key, i, [0; 4]), HopWord::Blank);
                assert_eq!(h.encode(&key, i, hv), None);
            }
        }
    }

    #[test]
    fn reference_postcard_extra_replicas_append_the_replica_byte() {
        let h = PostcardHasher::new(HashProfile::Reference, 1 << 20, 1 << 15, 5).unwrap();
        let key = Key::new(&[1, 2, 3, 4]).unwrap();
        assert_eq!(h.chunk(&key, 2), IEEE.checksum(&[1, 2, 3, 4, 2]) & 0xF_FFFF);
    }

    #[test]
    fn independent_keywrite_uses_one_polynomial_per_role() {
        let h = KeyHasher::new(HashProfile::Independent, 1 << 16).unwrap();
        let key = Key::new(b"10.0.0.1:80/tcp").unwrap();
        assert_eq!(
            h.checksum(&key),
            Crc32::new(POLYNOMIALS[0]).checksum(key.as_bytes())
        );
        let mut out = [0; MAX_REDUNDANCY];
        let c = h.checksum_and_slots(&key, MAX_REDUNDANCY, &mut out);
        assert_eq!(c, h.checksum(&key));
        for n in 0..MAX_REDUNDANCY {
            let want = Crc32::new(POLYNOMIALS[1 + n]).checksum(key.as_bytes()) & 0xFFFF;
            assert_eq!(out[n], want);
            assert_eq!(h.slot(&key, n as u8), want);
        }
    }

    #[test]
    fn reference_offsets_are_key_independent_and_independent_ones_are_not() {
        // The §11.6 defect, stated directly: slot(k, n) XOR slot(k, 0) is constant over k.
        let r = KeyHasher::new(HashProfile::Reference, 1 << 20).unwrap();
        let i = KeyHasher::new(HashProfile::Independent, 1 << 20).unwrap();
        let k0 = Key::from_u32_reference(0);
        let mut independent_varies = false;
        for k in 1..200u32 {
            let key = Key::from_u32_reference(k.wrapping_mul(0x9E37_79B9));
            for n in 1..4 {
                assert_eq!(
                    r.slot(&key, n) ^ r.slot(&key, 0),
                    r.slot(&k0, n) ^ r.slot(&k0, 0)
                );
                independent_varies |=
                    i.slot(&key, n) ^ i.slot(&key, 0) != i.slot(&k0, n) ^ i.slot(&k0, 0);
            }
        }
        assert!(independent_varies);
    }

    #[test]
    fn independent_postcard_roles() {
        let h = PostcardHasher::new(HashProfile::Independent, 1 << 10, 1 << 12, 16).unwrap();
        let key = Key::new(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3]).unwrap();
        let crc = |p: u32| Crc32::new(p).checksum(key.as_bytes());
        assert_eq!(h.cache_index(&key), crc(POLYNOMIALS[9]) & 0xFFF);
        for n in 0..MAX_REDUNDANCY as u8 {
            assert_eq!(h.chunk(&key, n), crc(POLYNOMIALS[1 + n as usize]) & 0x3FF);
        }
        for hop in 0..16 {
            let hh = crc(POLYNOMIALS[10 + hop]);
            assert_eq!(h.hop_hash(&key, hop), hh);
            assert_eq!(h.encode(&key, hop, 0), Some(hh.to_be_bytes()));
            assert_eq!(h.encode_blank(&key, hop), (hh ^ BLANK).to_be_bytes());
            assert_eq!(
                h.decode(&key, hop, h.encode_blank(&key, hop)),
                HopWord::Blank
            );
            assert_eq!(h.encode(&key, hop, BLANK), None);
            // Never-written memory is not blank: it decodes to a value outside any small V.
            assert_eq!(h.decode(&key, hop, [0; 4]), HopWord::Value(hh));
        }
    }

    #[test]
    fn constructor_bounds() {
        for p in [HashProfile::Reference, HashProfile::Independent] {
            assert!(KeyHasher::new(p, 0).is_none());
            assert!(KeyHasher::new(p, 1).is_none());
            assert!(KeyHasher::new(p, 3).is_none());
            assert!(KeyHasher::new(p, 2).is_some());
            assert!(KeyHasher::new(p, 1 << 31).is_some());
            assert!(PostcardHasher::new(p, 1, 1, 5).is_none());
            assert!(PostcardHasher::new(p, 2, 0, 5).is_none());
            assert!(PostcardHasher::new(p, 2, 3, 5).is_none());
            assert!(PostcardHasher::new(p, 2, 1, 5).is_some());
            assert!(PostcardHasher::new(p, 2, 1, 0).is_none());
            assert!(PostcardHasher::new(p, 2, 1, 17).is_none());
        }
        assert!(PostcardHasher::new(HashProfile::Reference, 2, 1, 4).is_none());
        assert!(PostcardHasher::new(HashProfile::Independent, 2, 1, 1).is_some());
        assert!(PostcardHasher::new(HashProfile::Independent, 2, 1, 16).is_some());
    }

    #[test]
    fn default_profile_is_independent() {
        assert_eq!(HashProfile::default(), HashProfile::Independent);
    }

    proptest! {
        /// The cache index (sixteen table rows) is the profile's CRC of the flow, masked.
        #[test]
        fn cache_index_paths_agree(bytes in proptest::collection::vec(any::<u8>(), 1..=16),
                                   log in 0u32..=20, reference in any::<bool>()) {
            let key = Key::new(&bytes).unwrap();
            let profile = if reference { HashProfile::Reference } else { HashProfile::Independent };
            let h = PostcardHasher::new(profile, 1 << 16, 1 << log, 5).unwrap();
            let crc = if reference {
                IEEE.checksum(&bytes)
            } else {
                ENGINES[CACHE_POLY_INDEX].checksum(&bytes)
            };
            let want = crc & ((1u32 << log) - 1);
            prop_assert_eq!(h.cache_index(&key), want);
        }

        #[test]
        fn digest_agrees_with_hop_hash_and_chunk(
            bytes in proptest::collection::vec(any::<u8>(), 1..=16),
            hops in 1u8..=16,
            replicas in 0usize..=MAX_REDUNDANCY,
            reference in any::<bool>(),
        ) {
            let key = Key::new(&bytes).unwrap();
            let (profile, hops) = if reference {
                (HashProfile::Reference, 5)
            } else {
                (HashProfile::Independent, hops)
            };
            let h = PostcardHasher::new(profile, 1 << 16, 1 << 10, hops).unwrap();
            let d = h.digest(&key, replicas);
            for hop in 0..hops as usize {
                prop_assert_eq!(d.hop[hop], h.hop_hash(&key, hop));
                prop_assert_eq!(h.blank_word(d.hop[hop]), h.encode_blank(&key, hop));
                for v in [0u32, 7, BLANK, d.hop[hop]] {
                    prop_assert_eq!(h.encode_word(d.hop[hop], v), h.encode(&key, hop, v));
                }
            }
            for r in 0..replicas {
                prop_assert_eq!(d.chunk[r], h.chunk(&key, r as u8));
            }
        }

        /// The keyed runs hash under [`crate::cpu::with_v3`]: its v3 copy (the CRC folds
        /// inlined, VEX-encoded) gives every key the checksum and slots the baseline's gives.
        #[test]
        fn checksum_and_slots_are_the_same_at_every_cpu_level(
            bytes in proptest::collection::vec(any::<u8>(), 1..=16),
            n in 0usize..=MAX_REDUNDANCY,
        ) {
            struct Hash<'a>(&'a KeyHasher, &'a Key, usize);
            use crate::cpu::Leveled;
            impl Leveled for Hash<'_> {
                type Output = (u32, [u32; MAX_REDUNDANCY]);
                #[inline(always)]
                fn run(self) -> Self::Output {
                    let mut out = [0; MAX_REDUNDANCY];
                    (self.0.checksum_and_slots(self.1, self.2, &mut out), out)
                }
            }
            let key = Key::new(&bytes).unwrap();
            for p in [HashProfile::Reference, HashProfile::Independent] {
                let h = KeyHasher::new(p, 1 << 20).unwrap();
                prop_assert_eq!(crate::cpu::with_v3(Hash(&h, &key, n)), Hash(&h, &key, n).run());
            }
        }

        #[test]
        fn checksum_and_slots_agree(bytes in proptest::collection::vec(any::<u8>(), 1..=16),
                                    n in 0usize..=MAX_REDUNDANCY) {
            let key = Key::new(&bytes).unwrap();
            for p in [HashProfile::Reference, HashProfile::Independent] {
                let h = KeyHasher::new(p, 1 << 20).unwrap();
                let mut out = [0; MAX_REDUNDANCY];
                prop_assert_eq!(h.checksum_and_slots(&key, n, &mut out), h.checksum(&key));
                for (r, &s) in out[..n].iter().enumerate() {
                    prop_assert_eq!(s, h.slot(&key, r as u8));
                }
            }
        }

        /// The carry-less path (the CPU's multiply, and the portable one) and the table lanes
        /// give every replica's slot and the checksum as the polynomial's own engine does.
        #[test]
        fn carry_less_and_table_lanes_agree(bytes in proptest::collection::vec(any::<u8>(), 1..=16),
                                            log in 1u32..=31, n in 0usize..=MAX_REDUNDANCY) {
            let key = Key::new(&bytes).unwrap();
            let h = KeyHasher::new(HashProfile::Independent, 1 << log).unwrap();
            let mask = (1u32 << log) - 1;
            let mut tables = [u32::MAX; MAX_REDUNDANCY];
            let sum = h.independent_tables(&key, n, &mut tables);
            prop_assert_eq!(sum, ENGINES[CHECKSUM_POLY_INDEX].checksum(&bytes));
            for (r, &s) in tables[..n].iter().enumerate() {
                prop_assert_eq!(s, ENGINES[REPLICA_POLY_BASE + r].checksum(&bytes) & mask);
            }
            for c in [Clmul::detect(), Clmul::portable()] {
                let mut out = [u32::MAX; MAX_REDUNDANCY];
                prop_assert_eq!(h.independent_clmul(c, &key, n, &mut out, true), sum);
                prop_assert_eq!(out, tables);
                let mut out = [u32::MAX; MAX_REDUNDANCY];
                prop_assert_eq!(h.independent_clmul(c, &key, n, &mut out, false), 0);
                prop_assert_eq!(out, tables);
            }
        }

        #[test]
        fn slots_agree_with_slot(bytes in proptest::collection::vec(any::<u8>(), 1..=16),
                                 log in 1u32..=31, n in 0usize..=MAX_REDUNDANCY) {
            let key = Key::new(&bytes).unwrap();
            for p in [HashProfile::Reference, HashProfile::Independent] {
                let h = KeyHasher::new(p, 1 << log).unwrap();
                let mut out = [u32::MAX; MAX_REDUNDANCY];
                h.slots(&key, n, &mut out);
                for (r, &s) in out[..n].iter().enumerate() {
                    prop_assert_eq!(s, h.slot(&key, r as u8));
                    prop_assert!(s < h.slot_count());
                }
                prop_assert!(out[n..].iter().all(|&s| s == u32::MAX));
            }
        }

        #[test]
        fn hop_words_round_trip(bytes in proptest::collection::vec(any::<u8>(), 1..=16),
                                hop in 0usize..5, v: u32) {
            let key = Key::new(&bytes).unwrap();
            for p in [HashProfile::Reference, HashProfile::Independent] {
                let h = PostcardHasher::new(p, 1 << 12, 1 << 15, 5).unwrap();
                match h.encode(&key, hop, v) {
                    Some(w) => prop_assert_eq!(h.decode(&key, hop, w), HopWord::Value(v)),
                    None => prop_assert_eq!(h.decode(&key, hop, h.encode_blank(&key, hop)),
                                            HopWord::Blank),
                }
                prop_assert_eq!(h.decode(&key, hop, h.encode_blank(&key, hop)), HopWord::Blank);
            }
        }
    }
}
