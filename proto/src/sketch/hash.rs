//! The sketch hashes: per-row column CRCs with the MurmurHash3 finaliser, the Count sketch's
//! sign, HyperLogLog's register and rank, and the Tofino profile's tabulation.

use super::{SketchHash, SketchShape, HLL_POLY_INDEX, MAX_ROWS};
use crate::crc::Crc32;
use crate::hash::{hop_poly, replica_poly, POLYNOMIALS};
use crate::types::Key;

const UNUSED: Crc32 = Crc32::new(0);

static ROW_ENGINES: [Crc32; MAX_ROWS as usize] = {
    let mut e = [UNUSED; MAX_ROWS as usize];
    let mut i = 0;
    while i < MAX_ROWS as usize {
        e[i] = Crc32::new(replica_poly(i));
        i += 1;
    }
    e
};

static SIGN_ENGINES: [Crc32; MAX_ROWS as usize] = {
    let mut e = [UNUSED; MAX_ROWS as usize];
    let mut i = 0;
    while i < MAX_ROWS as usize {
        e[i] = Crc32::new(hop_poly(i));
        i += 1;
    }
    e
};

pub(super) static HLL_ENGINE: Crc32 = Crc32::new(POLYNOMIALS[HLL_POLY_INDEX]);

/// The seed of the Tofino profile's tabulation tables (ASCII `DTASKTAB`).
pub const TAB_SEED: u64 = 0x4454_4153_4B54_4142;

/// The Tofino profile's tabulation tables: `TAB[i][b]` is the word byte `i` (0 = least
/// significant) of the CRC selects; successive splitmix64 outputs (low 32 bits) from
/// [`TAB_SEED`], table 0 first.
pub static TAB: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut state = TAB_SEED;
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 256 {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            t[i][b] = z as u32;
            b += 1;
        }
        i += 1;
    }
    t
};

/// Simple tabulation of a 32-bit word: `TAB[0][x₀] ⊕ TAB[1][x₁] ⊕ TAB[2][x₂] ⊕ TAB[3][x₃]`.
#[inline]
pub fn tabulate(x: u32) -> u32 {
    let b = x.to_le_bytes();
    TAB[0][b[0] as usize] ^ TAB[1][b[1] as usize] ^ TAB[2][b[2] as usize] ^ TAB[3][b[3] as usize]
}

/// MurmurHash3's 32-bit finaliser (`fmix32`): a bijection that makes every output bit depend
/// on every input bit, applied to each sketch CRC (see the module docs).
#[inline]
pub const fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The sketch hash functions (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SketchHasher {
    shape: SketchShape,
}

impl SketchHasher {
    /// Hashes for `shape`.
    pub fn new(shape: SketchShape) -> SketchHasher {
        SketchHasher { shape }
    }

    /// A column or sign CRC as the profile finishes it: `mix32` (independent) or as is
    /// (Tofino).
    #[inline]
    fn finish(&self, crc: u32) -> u32 {
        match self.shape.hash {
            SketchHash::Independent => mix32(crc),
            SketchHash::Tofino => crc,
        }
    }

    /// The column `key` maps to in row `row`.
    #[inline]
    pub fn column(&self, key: &Key, row: u8) -> u32 {
        self.finish(ROW_ENGINES[row as usize].checksum(key.as_bytes())) & (self.shape.columns - 1)
    }

    /// The Count sketch's sign of `key` in row `row` (+1 or −1).
    #[inline]
    pub fn sign(&self, key: &Key, row: u8) -> i32 {
        if self.finish(SIGN_ENGINES[row as usize].checksum(key.as_bytes())) >> 31 == 1 {
            -1
        } else {
            1
        }
    }

    /// HyperLogLog: the register `key` updates and its rank (1..=33 − p).
    #[inline]
    pub fn hll(&self, key: &Key) -> (u32, u8) {
        let p = self.shape.columns.trailing_zeros();
        let crc = HLL_ENGINE.checksum(key.as_bytes());
        let h = match self.shape.hash {
            SketchHash::Independent => mix32(crc),
            SketchHash::Tofino => tabulate(crc),
        };
        let idx = h >> (32 - p);
        let rest = h << p;
        let rank = if rest == 0 {
            32 - p + 1
        } else {
            rest.leading_zeros() + 1
        };
        (idx, rank as u8)
    }
}
