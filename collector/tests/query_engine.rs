//! The query engine against memory written exactly as a translator writes it (proto hashers
//! and layouts into a [`Region`]): the Key-Write plurality invariant (proptest), the papers'
//! Key-Write empty-return rates and the Postcarding example.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use proptest::prelude::*;

use dta_collector::memory::Region;
use dta_collector::query::keywrite::{KeyWriteAnswer, KeyWriteView, Vote};
use dta_collector::query::postcard::{encode_chunk, PathAnswer, PostcardView, ValueSet};
use dta_proto::analysis::keywrite_p_empty;
use dta_proto::hash::{HashProfile, KeyHasher, PostcardHasher, MAX_REDUNDANCY};
use dta_proto::layout::{KeyWriteLayout, PostcardLayout};
use dta_proto::Key;

/// The translator's Key-Write: N slots, each (checksum, value) in one RDMA WRITE.
fn translator_write(view: &KeyWriteView<'_>, key: &Key, value: &[u8], n: usize) {
    let mut slots = [0u32; MAX_REDUNDANCY];
    let cs = view.hasher.checksum_and_slots(key, n, &mut slots);
    let mut buf = [0u8; 64];
    let ss = view.layout.slot_size() as usize;
    view.layout.encode_slot(cs, value, &mut buf);
    for &s in &slots[..n] {
        view.region
            .write(view.layout.slot_offset(s), &buf[..ss])
            .unwrap();
    }
}

fn key(i: u64) -> Key {
    let mut k = [0u8; 13];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8] = 17;
    k[9..13].copy_from_slice(&(i as u32).to_be_bytes());
    Key::new(&k).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A plurality answer is always a value written for that key, except when the key's
    /// checksum collides with another written key's (or with an empty slot's zero), which the
    /// test detects and excludes.
    #[test]
    fn plurality_answers_only_values_written_for_the_key(
        writes in proptest::collection::vec((0u64..48, any::<u32>(), 1usize..=4), 1..400),
        profile in prop_oneof![Just(HashProfile::Independent), Just(HashProfile::Reference)],
        log_slots in 4u32..8,
    ) {
        let slots = 1u32 << log_slots;
        let layout = KeyWriteLayout::new(slots, 8).unwrap();
        let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
        let view = KeyWriteView { region: &region, layout, hasher: KeyHasher::new(profile, slots).unwrap() };
        let mut written: HashMap<u64, HashSet<[u8; 4]>> = HashMap::new();
        for &(k, v, n) in &writes {
            translator_write(&view, &key(k), &v.to_be_bytes(), n);
            written.entry(k).or_default().insert(v.to_be_bytes());
        }
        let mut by_checksum: HashMap<u32, u32> = HashMap::new();
        for &k in written.keys() {
            *by_checksum.entry(view.hasher.checksum(&key(k))).or_default() += 1;
        }
        for (&k, values) in &written {
            let cs = view.hasher.checksum(&key(k));
            if by_checksum[&cs] > 1 || cs == 0 {
                continue; // a checksum collision: excluded by the invariant's statement
            }
            for n in 1..=4 {
                if let KeyWriteAnswer::Value { value, votes, matches } =
                    view.query(&key(k), n, Vote::Plurality)
                {
                    let got: [u8; 4] = value.as_bytes().try_into().unwrap();
                    prop_assert!(values.contains(&got), "key {k}: {got:?} never written");
                    prop_assert!(votes >= 1 && votes <= matches);
                }
            }
        }
        // Keys never written return no value unless their checksum collides.
        for k in 48..96 {
            let cs = view.hasher.checksum(&key(k));
            if !by_checksum.contains_key(&cs) && cs != 0 {
                let a = view.query(&key(k), 4, Vote::Plurality);
                prop_assert_eq!(a, KeyWriteAnswer::Empty);
            }
        }
    }
}

/// Writes a stream of distinct keys and, after key `j`, queries key `j − alpha·M`: every
/// queried key has exactly `alpha·M` later keys, as the formula assumes. Returns the
/// empty-return and wrong-return rates.
fn keywrite_rates(
    profile: HashProfile,
    n: usize,
    log_slots: u32,
    alpha: f64,
    queries: u64,
) -> (f64, f64) {
    let slots = 1u32 << log_slots;
    let layout = KeyWriteLayout::new(slots, 8).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
    let view = KeyWriteView {
        region: &region,
        layout,
        hasher: KeyHasher::new(profile, slots).unwrap(),
    };
    let later = (alpha * slots as f64).round() as u64;
    let (mut empty, mut wrong) = (0u64, 0u64);
    for j in 0..queries + later {
        translator_write(&view, &key(j), &(j as u32).to_be_bytes(), n);
        if j >= later {
            let q = j - later;
            match view.query(&key(q), n, Vote::Plurality) {
                KeyWriteAnswer::Value { value, .. } => {
                    wrong += (value.as_bytes() != (q as u32).to_be_bytes()) as u64
                }
                _ => empty += 1,
            }
        }
    }
    (empty as f64 / queries as f64, wrong as f64 / queries as f64)
}

#[test]
fn keywrite_empty_rate_matches_the_papers_formula() {
    let alpha = 0.1;
    let queries = 200_000;
    let mut report = String::from("Key-Write empty-return rate, b = 32, alpha = 0.1, M = 2^16 slots, 200k queries\n  N  formula  independent  reference\n");
    for n in [1usize, 2, 4] {
        let want = keywrite_p_empty(alpha, n as u32, 32);
        let (ind, ind_wrong) = keywrite_rates(HashProfile::Independent, n, 16, alpha, queries);
        let (rf, _) = keywrite_rates(HashProfile::Reference, n, 16, alpha, queries);
        report += &format!(
            "  {n}  {:6.2}%  {:10.2}%  {:8.2}%\n",
            want * 100.0,
            ind * 100.0,
            rf * 100.0
        );
        assert!(
            (ind - want).abs() <= 0.005,
            "N={n}: measured {ind}, formula {want}"
        );
        assert_eq!(ind_wrong, 0.0);
    }
    let _ = writeln!(std::io::stderr(), "{report}");
}

#[test]
fn postcard_example_has_no_wrong_outputs() {
    // |V| = 2^18, B = 5, N = 2, alpha = 0.1, at 2^16 chunks; 10^6 queries.
    let chunks = 1u32 << 16;
    let layout = PostcardLayout::new(chunks, 5).unwrap();
    let hasher = PostcardHasher::new(HashProfile::Independent, chunks, 1, 5).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
    let values = ValueSet::new(&[[0, (1 << 18) - 1]], HashProfile::Independent).unwrap();
    let view = PostcardView {
        region: &region,
        layout,
        hasher,
        values: &values,
    };
    let later = (0.1 * chunks as f64).round() as u64;
    let queries = 1_000_000u64;
    let path_of = |f: u64| -> ([u32; 5], usize) {
        let x = f.wrapping_mul(0xD129_0E5B_5C4A_2B7F) ^ (f >> 7);
        let len = 1 + (x % 5) as usize;
        let mut p = [0u32; 5];
        for (i, h) in p.iter_mut().enumerate() {
            *h = ((x >> (8 * i)) as u32 ^ (i as u32 * 7919)) & ((1 << 18) - 1);
        }
        (p, len)
    };
    let mut buf = [0u8; 20];
    let (mut none, mut wrong, mut found) = (0u64, 0u64, 0u64);
    for j in 0..queries + later {
        let f = key(j);
        let (p, len) = path_of(j);
        encode_chunk(&hasher, &f, &p[..len], &mut buf).unwrap();
        for r in 0..2 {
            region
                .write(layout.chunk_offset(hasher.chunk(&f, r)), &buf)
                .unwrap();
        }
        if j >= later {
            let q = j - later;
            let (p, len) = path_of(q);
            match view.query(&key(q), 2, 1) {
                PathAnswer::Path { path, .. } if path.hops() == &p[..len] => found += 1,
                PathAnswer::Path { .. } => wrong += 1,
                _ => none += 1,
            }
        }
    }
    let bound = dta_proto::analysis::postcard_p_no_output(0.1, 2, 32, 5, 1 << 18);
    let _ = writeln!(
        std::io::stderr(),
        "Postcarding |V|=2^18 B=5 N=2 alpha=0.1: {queries} queries, {found} paths, {none} no output ({:.2}%, bound {:.2}%), {wrong} wrong",
        none as f64 * 100.0 / queries as f64,
        bound * 100.0
    );
    assert_eq!(wrong, 0);
    assert!((none as f64 / queries as f64) <= bound + 0.005);
}

#[test]
fn occupancy_sampling_recovers_the_load_factor() {
    // alpha = 0.1 of 2^16 slots, N = 2: the estimate should find alpha and the formula.
    let slots = 1u32 << 16;
    let layout = KeyWriteLayout::new(slots, 8).unwrap();
    let region = Region::anonymous(layout.region_len() as usize, false).unwrap();
    let view = KeyWriteView {
        region: &region,
        layout,
        hasher: KeyHasher::new(HashProfile::Independent, slots).unwrap(),
    };
    for j in 0..(slots as u64 / 10) {
        translator_write(&view, &key(j), &[1, 2, 3, 4], 2);
    }
    let e = dta_collector::query::estimate::keywrite(view.occupancy(slots), 2, 32);
    assert!((e.load_factor - 0.1).abs() < 0.005, "{e:?}");
    assert!(
        (e.p_empty_oldest - keywrite_p_empty(0.1, 2, 32)).abs() < 0.003,
        "{e:?}"
    );
    // A sample of 4096 slots is close too.
    let s = dta_collector::query::estimate::keywrite(view.occupancy(4096), 2, 32);
    assert!((s.load_factor - 0.1).abs() < 0.02, "{s:?}");
}
