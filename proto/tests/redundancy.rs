//! Does Key-Write redundancy help? A streaming simulation of one collector store.
//!
//! A store of M = 2^20 slots receives a stream of distinct random 4-byte keys, each written to
//! its N replica slots as (checksum). After writing key t we query key t − αM, so exactly
//! αM = 104,858 distinct keys (α = 0.1) have been written since it, for every probe: no probe
//! bias from writing all probe keys first (which is what inflated α in §11.6's table). A query
//! is "empty" if none of the key's N slots holds its checksum. Occupancy is kept apart from the
//! checksum because a checksum can be 0.
//!
//! Expected: with independent hashes the empty rate follows the paper's bound (1 − e^(−αN))^N
//! and falls with N. With the reference hashing every key's slots are a coset of one fixed
//! subspace of slot offsets (CRC is affine), so one later key overwrites all N copies at once
//! and the empty rate is 1 − e^(−αN), which *grows* with N (§11.6).
//!
//! Run `cargo test -p dta-proto --test redundancy -- --nocapture` to see the table.

use dta_proto::analysis::keywrite_p_empty;
use dta_proto::hash::{HashProfile, KeyHasher, MAX_REDUNDANCY};
use dta_proto::Key;

const LOG_SLOTS: u32 = 20;
const ALPHA: f64 = 0.1;
const PROBES: usize = 1_000_000;

/// murmur3's 32-bit finaliser: a bijection on u32, so keys derived from distinct t are distinct.
fn fmix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x = x.wrapping_mul(0xC2B2_AE35);
    x ^ (x >> 16)
}

/// The t-th key of the stream (distinct for distinct t < 2^32).
fn key_at(t: usize, seed: u32) -> Key {
    Key::from_u32_reference(fmix32((t as u32).wrapping_mul(0x9E37_79B1) ^ seed))
}

/// Empty-return rate over `PROBES` probes for `n` replicas in `profile`.
fn empty_rate(profile: HashProfile, n: usize, seed: u32) -> f64 {
    let slots = 1u32 << LOG_SLOTS;
    let gap = (ALPHA * slots as f64).round() as usize;
    let hasher = KeyHasher::new(profile, slots).unwrap();
    // Bit 32 marks an occupied slot; the low 32 bits hold the checksum.
    const OCCUPIED: u64 = 1 << 32;
    let mut memory = vec![0u64; slots as usize];
    let mut out = [0u32; MAX_REDUNDANCY];
    let mut empty = 0usize;
    for t in 0..gap + PROBES {
        let c = hasher.checksum_and_slots(&key_at(t, seed), n, &mut out);
        for &s in &out[..n] {
            memory[s as usize] = OCCUPIED | c as u64;
        }
        if t >= gap {
            let c = hasher.checksum_and_slots(&key_at(t - gap, seed), n, &mut out);
            if !out[..n]
                .iter()
                .any(|&s| memory[s as usize] == OCCUPIED | c as u64)
            {
                empty += 1;
            }
        }
    }
    empty as f64 / PROBES as f64
}

#[test]
fn redundancy_helps_only_with_independent_hashes() {
    let ns = [1usize, 2, 4];
    let seed = 0x0D7A_2023;
    let indep = ns.map(|n| empty_rate(HashProfile::Independent, n, seed));
    let refer = ns.map(|n| empty_rate(HashProfile::Reference, n, seed));
    let bound = ns.map(|n| keywrite_p_empty(ALPHA, n as u32, 32));
    let coset = ns.map(|n| -(-ALPHA * n as f64).exp_m1());

    println!(
        "Key-Write empty-return rate, M = 2^{LOG_SLOTS} slots, alpha = {ALPHA}, {PROBES} probes"
    );
    println!("{:<38} {:>8} {:>8} {:>8}", "", "N = 1", "N = 2", "N = 4");
    let row = |name: &str, v: [f64; 3]| {
        println!(
            "{name:<38} {:>7.2}% {:>7.2}% {:>7.2}%",
            v[0] * 100.0,
            v[1] * 100.0,
            v[2] * 100.0
        )
    };
    row("independent (measured)", indep);
    row("paper bound keywrite_p_empty(.1,N,32)", bound);
    row("reference (measured)", refer);
    row("coset model 1 - e^(-alpha N)", coset);

    assert!(
        indep[0] > indep[1] && indep[1] > indep[2],
        "independent: {indep:?}"
    );
    for i in 0..3 {
        assert!(
            (indep[i] - bound[i]).abs() < 0.005,
            "independent N={}: {}",
            ns[i],
            indep[i]
        );
    }
    assert!(
        refer[1] > refer[0] && refer[2] > refer[0],
        "reference: {refer:?}"
    );
    // The mechanism, not just the symptom: one later key wipes out all N copies.
    for i in 0..3 {
        assert!(
            (refer[i] - coset[i]).abs() < 0.005,
            "reference N={}: {}",
            ns[i],
            refer[i]
        );
    }
}
