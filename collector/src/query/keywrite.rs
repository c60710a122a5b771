//! Key-Write queries: read the N slots of a key, keep those whose checksum matches, vote.

use dta_proto::hash::{KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::KeyWriteLayout;
use dta_proto::Key;

use crate::memory::Region;

/// A value as stored in a slot (up to 60 bytes for 64-byte slots), compared byte for byte.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SlotValue {
    len: u8,
    bytes: [u8; 60],
}

impl SlotValue {
    fn new(b: &[u8]) -> SlotValue {
        let mut v = SlotValue {
            len: b.len().min(60) as u8,
            bytes: [0; 60],
        };
        v.bytes[..v.len as usize].copy_from_slice(&b[..v.len as usize]);
        v
    }

    /// The stored bytes (the store's full value width, zero padding included).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Default for SlotValue {
    fn default() -> Self {
        SlotValue {
            len: 0,
            bytes: [0; 60],
        }
    }
}

impl std::fmt::Debug for SlotValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// How to decide between the values found in a key's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    /// The most frequent matching value wins; a tie between different values is a conflict.
    Plurality,
    /// A value must appear in at least this many slots.
    Consensus(u8),
}

/// The answer to a Key-Write query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyWriteAnswer {
    /// A value, and how many of the N slots agreed on it.
    Value {
        /// The stored value (the store's full value width).
        value: SlotValue,
        /// Slots holding this value with a matching checksum.
        votes: u8,
        /// Slots with a matching checksum in total.
        matches: u8,
    },
    /// No slot holds the key's checksum: the key was never written or was overwritten.
    Empty,
    /// Matching slots disagree (or too few agree for the consensus threshold).
    Conflict {
        /// Slots with a matching checksum.
        matches: u8,
        /// Votes of the most frequent value.
        best_votes: u8,
    },
}

/// A key's checksum, slots and the first word of each slot, loaded ahead of the vote.
#[derive(Clone, Copy, Default)]
struct Probe {
    checksum: u32,
    slots: [u32; MAX_REDUNDANCY],
    first: [u64; MAX_REDUNDANCY],
}

/// A Key-Write store as the query engine sees it.
pub struct KeyWriteView<'a> {
    /// The store's memory.
    pub region: &'a Region,
    /// Its layout.
    pub layout: KeyWriteLayout,
    /// Its hash functions.
    pub hasher: KeyHasher,
}

impl KeyWriteView<'_> {
    /// Looks `key` up in its first `n` replica slots (the store's redundancy N: more slots
    /// would add ones no report for the key wrote).
    ///
    /// Slots are read as aligned 8-byte words straight from the region (no copy loop), and
    /// values are compared as words: two matching slots hold the same checksum, so equal
    /// words mean equal values. Nothing is allocated.
    #[inline]
    pub fn query(&self, key: &Key, n: usize, vote: Vote) -> KeyWriteAnswer {
        let n = n.clamp(1, MAX_REDUNDANCY);
        let p = self.probe(key, n);
        self.vote(&p, n, vote)
    }

    /// Hashes `key` and loads the first word of each of its `n` slots.
    #[inline]
    fn probe(&self, key: &Key, n: usize) -> Probe {
        let mut p = Probe::default();
        p.checksum = self.hasher.checksum_and_slots(key, n, &mut p.slots);
        // Issue every replica's first-word load before looking at any of them, so the
        // (usually cache-missing) reads overlap instead of serialising behind branches.
        for (w, &slot) in p.first[..n].iter_mut().zip(&p.slots[..n]) {
            *w = self
                .region
                .load_u64(self.layout.slot_offset(slot))
                .unwrap_or(0);
        }
        p
    }

    /// Votes over a probed key's slots.
    #[inline]
    fn vote(&self, p: &Probe, n: usize, vote: Vote) -> KeyWriteAnswer {
        const W: usize = 8;
        let (slots, first, checksum) = (&p.slots, &p.first, p.checksum);
        let words = self.layout.slot_size() as usize / 8;
        // Matching slots' words, and per distinct value its first row and its votes.
        let mut rows = [[0u64; W]; MAX_REDUNDANCY];
        let mut votes = [0u8; MAX_REDUNDANCY];
        let mut distinct = 0usize;
        let mut matches = 0u8;
        'replica: for i in 0..n {
            let slot = slots[i];
            if first[i] as u32 != checksum || slots[..i].contains(&slot) {
                // Not ours, or a replica that landed on a slot already counted (it must not
                // vote twice).
                continue;
            }
            matches += 1;
            let off = self.layout.slot_offset(slot);
            let row = &mut rows[distinct];
            row[0] = first[i];
            for (j, w) in row[1..words].iter_mut().enumerate() {
                *w = self.region.load_u64(off + 8 * (j as u64 + 1)).unwrap_or(0);
            }
            for d in 0..distinct {
                if rows[d][..words] == rows[distinct][..words] {
                    votes[d] += 1;
                    continue 'replica;
                }
            }
            votes[distinct] = 1;
            distinct += 1;
        }
        if matches == 0 {
            return KeyWriteAnswer::Empty;
        }
        let (mut best, mut best_at, mut winners) = (0u8, 0usize, 0usize);
        for (d, &v) in votes[..distinct].iter().enumerate() {
            if v > best {
                (best, best_at, winners) = (v, d, 1);
            } else if v == best {
                winners += 1;
            }
        }
        let need = match vote {
            Vote::Plurality => 1,
            Vote::Consensus(t) => t.max(1),
        };
        if winners == 1 && best >= need {
            let mut bytes = [0u8; 64];
            for (b, w) in bytes.chunks_exact_mut(8).zip(&rows[best_at][..words]) {
                b.copy_from_slice(&w.to_le_bytes());
            }
            KeyWriteAnswer::Value {
                value: SlotValue::new(&bytes[KeyWriteLayout::CHECKSUM_LEN..8 * words]),
                votes: best,
                matches,
            }
        } else {
            KeyWriteAnswer::Conflict {
                matches,
                best_votes: best,
            }
        }
    }

    /// Fraction of slots holding anything (a non-zero slot), by sampling up to `samples` slots.
    pub fn occupancy(&self, samples: u32) -> f64 {
        let slots = self.layout.slots();
        let step = (slots / samples.max(1)).max(1);
        let ss = self.layout.slot_size() as usize;
        let mut buf = [0u8; 64];
        let (mut used, mut seen) = (0u64, 0u64);
        let mut s = 0u32;
        while s < slots {
            if self
                .region
                .read(self.layout.slot_offset(s), &mut buf[..ss])
                .is_ok()
            {
                seen += 1;
                if buf[..ss].iter().any(|&b| b != 0) {
                    used += 1;
                }
            }
            s = s.saturating_add(step);
        }
        if seen == 0 {
            0.0
        } else {
            used as f64 / seen as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dta_proto::hash::HashProfile;

    fn view(region: &Region, slot_size: u32) -> KeyWriteView<'_> {
        KeyWriteView {
            region,
            layout: KeyWriteLayout::new(64, slot_size).unwrap(),
            hasher: KeyHasher::new(HashProfile::Independent, 64).unwrap(),
        }
    }

    #[test]
    fn hand_computed_slots_and_checksum_conflicts() {
        let r = Region::anonymous(64 * 16, false).unwrap();
        let v = view(&r, 16);
        let key = Key::new(&[10, 0, 0, 1]).unwrap();
        let cs = v.hasher.checksum(&key);
        let s: Vec<u32> = (0..3).map(|i| v.hasher.slot(&key, i)).collect();
        assert!(s[0] != s[1] && s[1] != s[2] && s[0] != s[2]);
        // Slot image: checksum little-endian, then the 12-byte value.
        let slot = |val: u8| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&cs.to_le_bytes());
            b[4..].fill(val);
            b
        };
        r.write(s[0] as u64 * 16, &slot(7)).unwrap();
        r.write(s[1] as u64 * 16, &slot(7)).unwrap();
        r.write(s[2] as u64 * 16, &slot(9)).unwrap();
        match v.query(&key, 3, Vote::Plurality) {
            KeyWriteAnswer::Value {
                value,
                votes,
                matches,
            } => assert_eq!((value.as_bytes(), votes, matches), (&[7u8; 12][..], 2, 3)),
            a => panic!("{a:?}"),
        }
        assert!(matches!(
            v.query(&key, 3, Vote::Consensus(3)),
            KeyWriteAnswer::Conflict {
                matches: 3,
                best_votes: 2
            }
        ));
        // Two slots disagreeing one to one: a conflict under plurality.
        assert!(matches!(
            v.query(&key, 2, Vote::Plurality),
            KeyWriteAnswer::Value { votes: 2, .. }
        ));
        r.write(s[1] as u64 * 16, &slot(9)).unwrap();
        assert_eq!(
            v.query(&key, 2, Vote::Plurality),
            KeyWriteAnswer::Conflict {
                matches: 2,
                best_votes: 1
            }
        );
        // A wrong checksum does not vote: flip one checksum bit in slot 1.
        let mut bad = slot(9);
        bad[0] ^= 1;
        r.write(s[1] as u64 * 16, &bad).unwrap();
        assert!(matches!(
            v.query(&key, 2, Vote::Plurality),
            KeyWriteAnswer::Value {
                votes: 1,
                matches: 1,
                ..
            }
        ));
        r.zero(0, r.len()).unwrap();
        assert_eq!(v.query(&key, 3, Vote::Plurality), KeyWriteAnswer::Empty);
    }
}
