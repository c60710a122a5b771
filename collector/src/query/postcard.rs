//! Postcarding queries: decode a flow's chunks back into the path its postcards described.
//!
//! Each hop word of a chunk is `h_hop(flow) XOR g(v)` (see [`dta_proto::hash`]). For the
//! queried flow, decoding a word yields a value or the blank marker ⊔; a chunk written by
//! *another* flow decodes to pseudo-random values, which almost never all fall in the small
//! value set V. The decoder is therefore a lookup over V ∪ {⊔}: [`ValueSet`] holds V as sorted
//! disjoint ranges (the identity `g` makes `{g(v) → v}` a membership test).
//!
//! # Validity and agreement
//! A chunk is **valid** for a flow iff, for some path length `l` with `1 ≤ l ≤ B`, hops
//! `0..l` decode to members of V and hops `l..B` decode to ⊔. (`l = 0` is rejected: in the
//! reference profile an all-zero, never-written chunk decodes to all blanks for every flow.)
//!
//! With N copies the query reads the flow's N chunks (a chunk index shared by two replicas is
//! read once) and applies this rule:
//! - no valid chunk: [`PathAnswer::Empty`];
//! - at least one valid chunk and every valid chunk decodes to the same path:
//!   [`PathAnswer::Path`], with the number of agreeing copies; a caller may demand more
//!   copies (`min_copies`), in which case fewer is reported as a conflict;
//! - two valid chunks that disagree: [`PathAnswer::Conflict`]. One of them is another flow's
//!   chunk that happens to decode validly (probability ((|V|+1)·2^−32)^B per chunk), or the
//!   flow's path changed between writes; either way no answer is safer than a guess.
//!
//! In the reference profile the blank hop is a raw zero word, exactly as the artefact writes
//! it, so blanks are not checksum-protected there.

use dta_proto::hash::{HashProfile, HopWord, PostcardHasher, BLANK, MAX_HOPS, MAX_REDUNDANCY};
use dta_proto::layout::PostcardLayout;
use dta_proto::Key;

use crate::memory::Region;

/// The value set V: sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValueSet {
    ranges: Vec<(u32, u32)>,
}

impl ValueSet {
    /// V from inclusive `[lo, hi]` ranges in any order (overlaps merge). Fails if a range is
    /// reversed, or if V would contain a value the profile cannot represent (the independent
    /// profile's blank marker `0xFFFF_FFFF`).
    pub fn new(ranges: &[[u32; 2]], profile: HashProfile) -> Result<ValueSet, String> {
        let mut r: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for &[lo, hi] in ranges {
            if lo > hi {
                return Err(format!("value range [{lo}, {hi}] is reversed"));
            }
            if profile == HashProfile::Independent && hi == BLANK {
                return Err(format!(
                    "value {BLANK:#x} is the blank marker and cannot be in V"
                ));
            }
            r.push((lo, hi));
        }
        r.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(r.len());
        for (lo, hi) in r {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        Ok(ValueSet { ranges: merged })
    }

    /// True if `v` ∈ V.
    #[inline]
    pub fn contains(&self, v: u32) -> bool {
        // The first range whose upper end is ≥ v is the only one that can hold v.
        let i = self.ranges.partition_point(|&(_, hi)| hi < v);
        self.ranges.get(i).is_some_and(|&(lo, _)| lo <= v)
    }

    /// |V|.
    pub fn len(&self) -> u64 {
        self.ranges
            .iter()
            .map(|&(lo, hi)| (hi - lo) as u64 + 1)
            .sum()
    }

    /// True if V is empty (then no chunk is ever valid).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, merged and sorted.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }
}

/// A decoded path: hop values `hops[..len]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Path {
    hops: [u32; MAX_HOPS],
    len: u8,
}

impl Path {
    /// The hop values (switch IDs), first hop first.
    pub fn hops(&self) -> &[u32] {
        &self.hops[..self.len as usize]
    }
}

impl std::fmt::Debug for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.hops()).finish()
    }
}

/// The answer to a Postcarding query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathAnswer {
    /// The flow's path.
    Path {
        /// The path.
        path: Path,
        /// Valid chunks holding it (all valid chunks agree).
        copies: u8,
    },
    /// No chunk of the flow is valid: never written, or overwritten.
    Empty,
    /// Valid chunks disagree, or fewer than the required copies agree.
    Conflict {
        /// Valid chunks found.
        valid: u8,
    },
}

/// A Postcarding store as the query engine sees it.
pub struct PostcardView<'a> {
    /// The store's memory.
    pub region: &'a Region,
    /// Its layout.
    pub layout: PostcardLayout,
    /// Its chunk and hop functions (the cache size is irrelevant to queries).
    pub hasher: PostcardHasher,
    /// The value set V.
    pub values: &'a ValueSet,
}

impl PostcardView<'_> {
    /// Decodes chunk `chunk` for `flow`: the path if the chunk is valid for it.
    pub fn decode_chunk(&self, flow: &Key, chunk: u32) -> Option<Path> {
        let hops = self.layout.hops() as usize;
        let mut buf = [0u8; 4 * MAX_HOPS];
        let words = &mut buf[..4 * hops];
        self.region
            .read(self.layout.chunk_offset(chunk), words)
            .ok()?;
        let mut path = Path {
            hops: [0; MAX_HOPS],
            len: 0,
        };
        let mut blank_seen = false;
        for (i, w) in words.chunks_exact(4).enumerate() {
            match self.hasher.decode(flow, i, [w[0], w[1], w[2], w[3]]) {
                HopWord::Blank => blank_seen = true,
                HopWord::Value(v) if !blank_seen && self.values.contains(v) => {
                    path.hops[i] = v;
                    path.len += 1;
                }
                HopWord::Value(_) => return None,
            }
        }
        (path.len > 0).then_some(path)
    }

    /// Looks `flow` up in its first `n` chunks (clamped to 1..=8) and applies the agreement
    /// rule of the module docs, requiring at least `min_copies` agreeing valid chunks.
    pub fn query(&self, flow: &Key, n: usize, min_copies: u8) -> PathAnswer {
        let n = n.clamp(1, MAX_REDUNDANCY);
        let mut seen = [u32::MAX; MAX_REDUNDANCY];
        let mut found: Option<Path> = None;
        let (mut valid, mut disagree) = (0u8, false);
        for r in 0..n {
            let c = self.hasher.chunk(flow, r as u8);
            if seen[..r].contains(&c) {
                continue;
            }
            seen[r] = c;
            let Some(p) = self.decode_chunk(flow, c) else {
                continue;
            };
            valid += 1;
            match found {
                None => found = Some(p),
                Some(f) if f != p => disagree = true,
                Some(_) => {}
            }
        }
        match found {
            None => PathAnswer::Empty,
            Some(path) if !disagree && valid >= min_copies.max(1) => PathAnswer::Path {
                path,
                copies: valid,
            },
            Some(_) => PathAnswer::Conflict { valid },
        }
    }

    /// Fraction of chunks that hold anything (not all zero), sampling up to `samples` chunks.
    pub fn occupancy(&self, samples: u32) -> f64 {
        let chunks = self.layout.chunks();
        let step = (chunks / samples.max(1)).max(1);
        let hops = self.layout.hops() as usize;
        let mut buf = [0u8; 4 * MAX_HOPS];
        let (mut used, mut seen) = (0u64, 0u64);
        let mut c = 0u32;
        while c < chunks {
            if self
                .region
                .read(self.layout.chunk_offset(c), &mut buf[..4 * hops])
                .is_ok()
            {
                seen += 1;
                used += buf[..4 * hops].iter().any(|&b| b != 0) as u64;
            }
            c = c.saturating_add(step);
        }
        if seen == 0 {
            0.0
        } else {
            used as f64 / seen as f64
        }
    }
}

/// Writes `path` for `flow` into chunk `chunk` exactly as a translator would (every hop,
/// blanks after the path). Test and simulation helper; `None` if a value is unrepresentable.
pub fn encode_chunk(
    hasher: &PostcardHasher,
    flow: &Key,
    path: &[u32],
    out: &mut [u8],
) -> Option<()> {
    let hops = hasher.hops() as usize;
    if path.len() > hops || out.len() < 4 * hops {
        return None;
    }
    for i in 0..hops {
        let w = match path.get(i) {
            Some(&v) => hasher.encode(flow, i, v)?,
            None => hasher.encode_blank(flow, i),
        };
        out[4 * i..4 * i + 4].copy_from_slice(&w);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(profile: HashProfile, chunks: u32) -> (Region, PostcardLayout, PostcardHasher) {
        let l = PostcardLayout::new(chunks, 5).unwrap();
        let r = Region::anonymous(l.region_len() as usize, false).unwrap();
        (r, l, PostcardHasher::new(profile, chunks, 1, 5).unwrap())
    }

    fn put(r: &Region, l: &PostcardLayout, h: &PostcardHasher, flow: &Key, path: &[u32], n: u8) {
        let mut buf = [0u8; 20];
        encode_chunk(h, flow, path, &mut buf).unwrap();
        for i in 0..n {
            r.write(l.chunk_offset(h.chunk(flow, i)), &buf).unwrap();
        }
    }

    #[test]
    fn value_set_lookup() {
        let v = ValueSet::new(
            &[[10, 20], [5, 5], [21, 30], [100, 100]],
            HashProfile::Reference,
        )
        .unwrap();
        assert_eq!(v.ranges(), &[(5, 5), (10, 30), (100, 100)]);
        assert_eq!(v.len(), 23);
        for (x, want) in [(4, false), (5, true), (6, false), (10, true), (30, true)] {
            assert_eq!(v.contains(x), want, "{x}");
        }
        assert!(!v.contains(31) && v.contains(100) && !v.contains(u32::MAX));
        assert!(ValueSet::new(&[[3, 2]], HashProfile::Reference).is_err());
        assert!(ValueSet::new(&[[0, u32::MAX]], HashProfile::Independent).is_err());
        assert!(ValueSet::new(&[[0, u32::MAX]], HashProfile::Reference).is_ok());
    }

    #[test]
    fn hand_computed_reference_chunk() {
        // Reference profile: word = (v XOR H_hop(flow)) big-endian; blank = raw zero.
        let (r, l, h) = setup(HashProfile::Reference, 64);
        let vs = ValueSet::new(&[[1, 1000]], HashProfile::Reference).unwrap();
        let view = PostcardView {
            region: &r,
            layout: l,
            hasher: h,
            values: &vs,
        };
        let flow = Key::new(&[10, 0, 0, 1, 10, 0, 0, 2, 17, 0x1f, 0x90, 0, 80]).unwrap();
        let c = h.chunk(&flow, 0);
        let mut img = [0u8; 20];
        for (i, v) in [7u32, 8, 9].into_iter().enumerate() {
            img[4 * i..4 * i + 4].copy_from_slice(&(v ^ h.hop_hash(&flow, i)).to_be_bytes());
        }
        // Hops 3 and 4 stay raw zero: blank.
        r.write(l.chunk_offset(c), &img).unwrap();
        match view.query(&flow, 1, 1) {
            PathAnswer::Path { path, copies } => {
                assert_eq!((path.hops(), copies), (&[7, 8, 9][..], 1))
            }
            a => panic!("{a:?}"),
        }
        // A blank hop followed by a value is not a path.
        let mut bad = img;
        bad[4..8].fill(0);
        r.write(l.chunk_offset(c), &bad).unwrap();
        assert_eq!(view.query(&flow, 1, 1), PathAnswer::Empty);
        // A value outside V is not a path.
        let mut out = img;
        out[8..12].copy_from_slice(&(5000 ^ h.hop_hash(&flow, 2)).to_be_bytes());
        r.write(l.chunk_offset(c), &out).unwrap();
        assert_eq!(view.query(&flow, 1, 1), PathAnswer::Empty);
        // All blank (never written) is not a path either.
        r.zero(0, r.len()).unwrap();
        assert_eq!(view.query(&flow, 1, 1), PathAnswer::Empty);
    }

    #[test]
    fn hand_computed_independent_chunk_with_blanks() {
        let (r, l, h) = setup(HashProfile::Independent, 64);
        let vs = ValueSet::new(&[[0, 1 << 18]], HashProfile::Independent).unwrap();
        let view = PostcardView {
            region: &r,
            layout: l,
            hasher: h,
            values: &vs,
        };
        let flow = Key::new(b"flow-1").unwrap();
        let c = h.chunk(&flow, 0);
        let mut img = [0u8; 20];
        img[0..4].copy_from_slice(&(42 ^ h.hop_hash(&flow, 0)).to_be_bytes());
        for i in 1..5 {
            img[4 * i..4 * i + 4].copy_from_slice(&(BLANK ^ h.hop_hash(&flow, i)).to_be_bytes());
        }
        r.write(l.chunk_offset(c), &img).unwrap();
        match view.query(&flow, 1, 1) {
            PathAnswer::Path { path, .. } => assert_eq!(path.hops(), &[42]),
            a => panic!("{a:?}"),
        }
        // In the independent profile a raw zero word is not a blank.
        r.zero(l.hop_offset(c, 4), 4).unwrap();
        assert_eq!(view.query(&flow, 1, 1), PathAnswer::Empty);
        // Another flow does not decode this chunk.
        r.write(l.chunk_offset(c), &img).unwrap();
        let other = Key::new(b"flow-2").unwrap();
        if h.chunk(&other, 0) == c {
            assert_eq!(view.decode_chunk(&other, c), None);
        }
    }

    #[test]
    fn agreement_rule_with_two_copies() {
        for p in [HashProfile::Reference, HashProfile::Independent] {
            let (r, l, h) = setup(p, 1 << 10);
            let vs = ValueSet::new(&[[1, 100]], p).unwrap();
            let view = PostcardView {
                region: &r,
                layout: l,
                hasher: h,
                values: &vs,
            };
            let flow = Key::new(&[1, 2, 3, 4, 5]).unwrap();
            let (c0, c1) = (h.chunk(&flow, 0), h.chunk(&flow, 1));
            assert_ne!(c0, c1);
            put(&r, &l, &h, &flow, &[1, 2, 3, 4, 5], 2);
            let want = |a: PathAnswer, copies: u8| match a {
                PathAnswer::Path { path, copies: c } => {
                    assert_eq!((path.hops(), c), (&[1, 2, 3, 4, 5][..], copies))
                }
                a => panic!("{a:?}"),
            };
            want(view.query(&flow, 2, 1), 2);
            want(view.query(&flow, 2, 2), 2);
            // One copy overwritten with garbage: the other still answers.
            r.write(l.chunk_offset(c1), &[0xA5; 20]).unwrap();
            want(view.query(&flow, 2, 1), 1);
            assert_eq!(view.query(&flow, 2, 2), PathAnswer::Conflict { valid: 1 });
            // Both valid but different paths: conflict.
            let mut buf = [0u8; 20];
            encode_chunk(&h, &flow, &[9, 9], &mut buf).unwrap();
            r.write(l.chunk_offset(c1), &buf).unwrap();
            assert_eq!(view.query(&flow, 2, 1), PathAnswer::Conflict { valid: 2 });
            // Both gone.
            r.zero(l.chunk_offset(c0), 20).unwrap();
            r.zero(l.chunk_offset(c1), 20).unwrap();
            assert_eq!(view.query(&flow, 2, 1), PathAnswer::Empty);
        }
    }
}
