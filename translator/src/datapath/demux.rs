//! O(1) demultiplexing for the hot path: a fast, non-cryptographic hasher for the small keys
//! the datapath looks up per packet (a QPN, a reporter's address).
//!
//! The keys come from the network, so a hostile sender can choose them; the maps that use
//! this hasher are bounded (pre-sized, never grown past their limit), so collisions can cost
//! probe length but never memory. Every bit of the key reaches the low bits the table indexes
//! by (a test checks addresses that differ only in their high bits spread out).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher (the FxHash construction) over `u64` words.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits depending only on the key's low bits (a reporter's
        // port is the same for all its addresses), and the table indexes by the low bits: fold
        // the high half in (the splitmix64 finalizer).
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(K);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// An empty map with room for `n` entries (no allocation until it holds more).
pub fn fast_map<K, V>(n: usize) -> FastMap<K, V> {
    FastMap::with_capacity_and_hasher(n, BuildHasherDefault::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};

    #[test]
    fn keys_differing_in_high_bits_spread_over_the_low_bits() {
        let b = BuildHasherDefault::<FastHasher>::default();
        // 10,000 reporters on one port: (address << 16) | port.
        let mut buckets = std::collections::HashSet::new();
        for i in 0..10_000u64 {
            let key = (0x0a00_0000 + i) << 16 | 40041;
            buckets.insert(b.hash_one(key) & 0x3fff);
        }
        // 16,384 buckets: a uniform hash fills about 7,600 of them.
        assert!(buckets.len() > 7_000, "{} buckets", buckets.len());
    }
}
