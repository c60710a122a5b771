//! Load-factor and expected-success estimates, from occupancy samples and the papers' formulas
//! ([`dta_proto::analysis`], reference §12).
//!
//! The collector cannot count the keys written into a store (the CPU never sees a report),
//! but it can sample how many slots are occupied. If K distinct keys each wrote N replicas
//! into M slots, a slot is still empty with probability e^(−K·N/M), so an occupancy `o` gives
//! the load factor `alpha = K/M = −ln(1 − o) / N`. For the key written first, `alpha` is also
//! the number of later keys per slot, which is what the formulas take: its P(empty) is the
//! worst case. A key of uniformly random age saw `alpha · u` later keys for `u` uniform in
//! [0, 1]; averaging the formula over `u` gives the mean.

use serde::Serialize;

use dta_proto::analysis;

/// How many points the mean over key ages integrates (midpoint rule).
const AGE_POINTS: u32 = 64;

/// What the collector can say about one store's fill and query success.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Fraction of sampled slots (chunks, counters, ring slots) that hold data.
    pub occupancy: f64,
    /// Estimated distinct keys written per slot (`alpha`); for Append the ring fill (0..=1,
    /// above 1 once the writer wrapped).
    pub load_factor: f64,
    /// P(empty / no output) for the oldest key (the worst case), from the formula.
    pub p_empty_oldest: f64,
    /// P(empty / no output) averaged over key ages.
    pub p_empty_mean: f64,
    /// P(wrong answer) for the oldest key (upper bound).
    pub p_wrong_oldest: f64,
    /// Expected query success for a key of random age: `1 − p_empty_mean`.
    pub expected_success: f64,
}

/// `alpha` from an occupancy fraction and the replica count.
pub fn alpha_from_occupancy(occupancy: f64, n: u32) -> f64 {
    let o = occupancy.clamp(0.0, 1.0 - 1e-12);
    -(-o).ln_1p() / n.max(1) as f64
}

fn from_formulas(occupancy: f64, n: u32, empty: impl Fn(f64) -> f64, wrong: f64) -> Estimate {
    let alpha = alpha_from_occupancy(occupancy, n);
    let mean = (0..AGE_POINTS)
        .map(|i| empty(alpha * (i as f64 + 0.5) / AGE_POINTS as f64))
        .sum::<f64>()
        / AGE_POINTS as f64;
    Estimate {
        occupancy,
        load_factor: alpha,
        p_empty_oldest: empty(alpha),
        p_empty_mean: mean,
        p_wrong_oldest: wrong,
        expected_success: 1.0 - mean,
    }
}

/// Key-Write with `n` replicas and `b`-bit checksums (32 in every profile).
pub fn keywrite(occupancy: f64, n: u32, b: u32) -> Estimate {
    let alpha = alpha_from_occupancy(occupancy, n);
    from_formulas(
        occupancy,
        n,
        |a| analysis::keywrite_p_empty(a, n, b),
        analysis::keywrite_p_wrong(alpha, n, b),
    )
}

/// Postcarding with `n` copies, `hops` hop words of 32 bits and a value set of `v` values.
pub fn postcard(occupancy: f64, n: u32, hops: u32, v: u64) -> Estimate {
    let alpha = alpha_from_occupancy(occupancy, n);
    from_formulas(
        occupancy,
        n,
        |a| analysis::postcard_p_no_output(a, n, 32, hops, v),
        analysis::postcard_p_wrong(alpha, n, 32, hops, v),
    )
}

/// Key-Increment: occupancy of the counters, `alpha` as for Key-Write, and as "empty" the
/// count-min bound on an overestimate of at least 1% of the average count per key.
/// `total_mass` is the sum of all counters (each increment counted `n` times).
pub fn counter(occupancy: f64, total_mass: f64, slots: u64, n: u32) -> Estimate {
    let alpha = alpha_from_occupancy(occupancy, n);
    let increments = total_mass / n.max(1) as f64;
    let keys = (alpha * slots as f64).max(1.0);
    let threshold = (0.01 * increments / keys).max(1.0);
    let p = analysis::countmin_overestimate_bound(increments, slots, n, threshold);
    Estimate {
        occupancy,
        load_factor: alpha,
        p_empty_oldest: p,
        p_empty_mean: p,
        p_wrong_oldest: p,
        expected_success: 1.0 - p,
    }
}

/// Append: `fill` is written batches over ring slots, averaged over lists (above 1 once the
/// writer wrapped); a reader that polls before the writer laps it loses nothing, so the
/// expected success is the share of lists that have not wrapped.
pub fn append(occupancy: f64, fill: f64, wrapped_share: f64) -> Estimate {
    Estimate {
        occupancy,
        load_factor: fill,
        p_empty_oldest: wrapped_share,
        p_empty_mean: wrapped_share,
        p_wrong_oldest: 0.0,
        expected_success: 1.0 - wrapped_share,
    }
}

/// A Sketch-Merge store: `completeness` is the fraction of the newest epoch's expected
/// switch-column contributions merged. A sketch answers every query (its error is the
/// sketch's own, not a lost write), so only the fill is reported.
pub fn sketch(completeness: f64) -> Estimate {
    Estimate {
        occupancy: completeness,
        load_factor: completeness,
        p_empty_oldest: 0.0,
        p_empty_mean: 0.0,
        p_wrong_oldest: 0.0,
        expected_success: 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_inverts_to_alpha() {
        for n in 1..=4 {
            for alpha in [0.01, 0.1, 0.5, 1.0] {
                let o = 1.0 - (-alpha * n as f64).exp();
                assert!((alpha_from_occupancy(o, n) - alpha).abs() < 1e-9);
            }
        }
        assert_eq!(alpha_from_occupancy(0.0, 2), 0.0);
        assert!(alpha_from_occupancy(1.0, 2).is_finite());
    }

    #[test]
    fn keywrite_estimate_matches_the_paper_at_alpha_0_1() {
        let o = 1.0 - (-0.2f64).exp();
        let e = keywrite(o, 2, 32);
        assert!((e.load_factor - 0.1).abs() < 1e-9);
        assert!((0.0325..0.033).contains(&e.p_empty_oldest));
        assert!(e.p_empty_mean < e.p_empty_oldest && e.p_empty_mean > 0.0);
        assert!(e.p_wrong_oldest < 1.6e-11);
        assert!((e.expected_success - (1.0 - e.p_empty_mean)).abs() < 1e-15);
        let p = postcard(o, 2, 5, 1 << 18);
        assert!(p.p_empty_oldest < 0.033 && p.p_wrong_oldest < 1e-22);
        assert_eq!(keywrite(0.0, 2, 32).p_empty_oldest, 0.0);
    }

    #[test]
    fn counter_and_append_estimates() {
        let c = counter(0.5, 2e6, 1 << 20, 2);
        assert!(c.load_factor > 0.0 && (0.0..=1.0).contains(&c.p_empty_oldest));
        let a = append(1.0, 1.5, 0.25);
        assert_eq!(a.expected_success, 0.75);
    }
}
