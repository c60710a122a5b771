//! The papers' success-probability formulas (reference §12), for load-factor and
//! expected-success estimates.
//!
//! Notation: a store of M slots (or chunks); `alpha · M` distinct keys were written after the
//! queried one; each key writes `n` replicas; `p = 1 − e^(−alpha·n)` is the probability that one
//! given replica has been overwritten (each later key hits it with probability ≈ n / M). A
//! replica overwritten by another key still *looks* like ours with a small probability `f`
//! (a b-bit checksum collision, `f = 2^−b`; for Postcarding, a whole chunk decoding to a valid
//! path). All bounds assume the n replica positions are independent uniform hashes, which the
//! [`crate::hash::HashProfile::Independent`] profile provides and the reference one does not.
//!
//! The evaluation is exact and numerically stable for tiny `f`: `1 − (1 − f)^j` uses
//! `expm1`/`ln_1p`, and "two or more false matches" is summed as a binomial tail rather than
//! computed as `1 − q^n − n·f·q^(n−1)`, which cancels catastrophically.

/// Binomial coefficient C(n, k) as a float (n ≤ a few dozen here).
fn choose(n: u32, k: u32) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// `1 − (1 − f)^j`: the chance that at least one of `j` overwritten replicas falsely matches.
fn any_false(f: f64, j: u32) -> f64 {
    -(j as f64 * (-f).ln_1p()).exp_m1()
}

/// P(at least two of `n` overwritten replicas falsely match) = Σ_{k≥2} C(n,k) f^k (1−f)^(n−k).
fn two_or_more_false(f: f64, n: u32) -> f64 {
    (2..=n)
        .map(|k| choose(n, k) * f.powi(k as i32) * (1.0 - f).powi((n - k) as i32))
        .sum()
}

/// Probability that one replica was overwritten by the `alpha · M` later keys, each writing `n`.
fn p_overwritten(alpha: f64, n: u32) -> f64 {
    -(-alpha * n as f64).exp_m1()
}

/// The papers' empty-return bound with per-replica false-match probability `f`:
/// all overwritten and no false match, or all overwritten with two or more (ambiguous) false
/// matches, or some intact and some falsely matching (a conflict).
fn p_empty_with(alpha: f64, n: u32, f: f64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let p = p_overwritten(alpha, n);
    let survive = (-alpha * n as f64).exp();
    let all_gone = p.powi(n as i32);
    let none_false = 1.0 - any_false(f, n);
    let mixed: f64 = (1..n)
        .map(|j| choose(n, j) * p.powi(j as i32) * survive.powi((n - j) as i32) * any_false(f, j))
        .sum();
    all_gone * none_false + all_gone * two_or_more_false(f, n) + mixed
}

/// The papers' wrong-return bound: all replicas overwritten and one of them falsely matches.
fn p_wrong_with(alpha: f64, n: u32, f: f64) -> f64 {
    p_overwritten(alpha, n).powi(n as i32) * n as f64 * f
}

/// Key-Write: upper bound on P(query returns empty) for load `alpha`, `n` replicas and `b`-bit
/// checksums, exactly the §12 expression:
/// (1−e^(−αN))^N (1−2^−b)^N + (1−e^(−αN))^N (1−(1−2^−b)^N − N 2^−b (1−2^−b)^(N−1))
/// + Σ_{j=1}^{N−1} C(N,j) (1−e^(−αN))^j e^(−αN(N−j)) (1−(1−2^−b)^j).
pub fn keywrite_p_empty(alpha: f64, n: u32, b: u32) -> f64 {
    p_empty_with(alpha, n, (-(b as f64)).exp2())
}

/// Key-Write: upper bound on P(query returns a wrong value): (1−e^(−αN))^N · N · 2^−b.
pub fn keywrite_p_wrong(alpha: f64, n: u32, b: u32) -> f64 {
    p_wrong_with(alpha, n, (-(b as f64)).exp2())
}

/// Postcarding: probability that a chunk written by another flow decodes, for the queried
/// flow, to a valid path: each of the `hops` words must land on one of the `|V| + 1` codes of
/// `V ∪ {⊔}` out of 2^b, so it is at most ((|V| + 1) · 2^−b)^B (the paper's bound; the
/// prefix-then-blank shape makes the exact figure a little smaller).
pub fn postcard_false_chunk(b: u32, hops: u32, value_set_size: u64) -> f64 {
    (((value_set_size as f64 + 1.0) * (-(b as f64)).exp2()).min(1.0)).powi(hops as i32)
}

/// Postcarding: upper bound on P(no output) for load `alpha` (later flows per chunk), `n`
/// replicas, `b`-bit hop words, `hops` hops per chunk and a value set of `value_set_size`.
///
/// Derivation: a chunk plays the role of a Key-Write slot and "decodes to a valid path" the
/// role of "checksum matches", so this is [`keywrite_p_empty`] with 2^−b replaced by
/// [`postcard_false_chunk`]. No output means every chunk was overwritten with none (or several
/// disagreeing) falsely valid, or an intact chunk disagrees with a falsely valid one.
pub fn postcard_p_no_output(alpha: f64, n: u32, b: u32, hops: u32, value_set_size: u64) -> f64 {
    p_empty_with(alpha, n, postcard_false_chunk(b, hops, value_set_size))
}

/// Postcarding: upper bound on P(wrong path): every chunk overwritten and one falsely valid,
/// (1−e^(−αN))^N · N · ((|V|+1) 2^−b)^B (same substitution as [`postcard_p_no_output`]).
pub fn postcard_p_wrong(alpha: f64, n: u32, b: u32, hops: u32, value_set_size: u64) -> f64 {
    p_wrong_with(alpha, n, postcard_false_chunk(b, hops, value_set_size))
}

/// Key-Increment (count-min over one shared array): upper bound on the probability that a
/// key's estimate exceeds its true count by at least `threshold`.
///
/// With `total` increments spread over `slots` counters by `n` hashes each, one counter
/// collects an expected `total · n / slots` of other keys' counts; Markov's inequality bounds
/// one counter's excess and the minimum of `n` (independent) counters multiplies the bounds:
/// `min(1, total · n / (slots · threshold))^n`.
pub fn countmin_overestimate_bound(total: f64, slots: u64, n: u32, threshold: f64) -> f64 {
    if threshold <= 0.0 || slots == 0 {
        return 1.0;
    }
    (total * n as f64 / (slots as f64 * threshold))
        .min(1.0)
        .powi(n as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywrite_paper_examples() {
        let e1 = keywrite_p_empty(0.1, 1, 32);
        let e2 = keywrite_p_empty(0.1, 2, 32);
        let e4 = keywrite_p_empty(0.1, 4, 32);
        assert!((0.0945..0.0955).contains(&e1), "{e1}");
        assert!((0.0325..0.033).contains(&e2), "{e2}");
        assert!((0.0115..0.0125).contains(&e4), "{e4}");
        let w2 = keywrite_p_wrong(0.1, 2, 32);
        assert!((1.4e-11..1.6e-11).contains(&w2), "{w2}");
    }

    #[test]
    fn keywrite_matches_the_literal_expression() {
        // The §12 formula written out naively; fine for small b where nothing cancels.
        let literal = |a: f64, n: u32, b: u32| {
            let p = 1.0 - (-a * n as f64).exp();
            let f = 2f64.powi(-(b as i32));
            let q = 1.0 - f;
            let nn = n as i32;
            let mut s = p.powi(nn) * q.powi(nn)
                + p.powi(nn) * (1.0 - q.powi(nn) - n as f64 * f * q.powi(nn - 1));
            for j in 1..n {
                s += choose(n, j)
                    * p.powi(j as i32)
                    * (-a * n as f64 * (n - j) as f64).exp()
                    * (1.0 - q.powi(j as i32));
            }
            s
        };
        for n in 1..=8 {
            for b in [1, 2, 4, 8, 12] {
                for a in [0.01, 0.1, 0.5, 2.0] {
                    let (x, y) = (keywrite_p_empty(a, n, b), literal(a, n, b));
                    assert!((x - y).abs() < 1e-12, "n={n} b={b} a={a}: {x} vs {y}");
                }
            }
        }
    }

    #[test]
    fn keywrite_monotone_in_load() {
        for n in 1..=8 {
            let mut last = 0.0;
            for i in 1..100 {
                let e = keywrite_p_empty(i as f64 * 0.02, n, 32);
                assert!(e > last && e <= 1.0);
                last = e;
            }
        }
        assert_eq!(keywrite_p_empty(0.0, 2, 32), 0.0);
    }

    #[test]
    fn postcard_paper_example() {
        let v = 1 << 18;
        let none = postcard_p_no_output(0.1, 2, 32, 5, v);
        let wrong = postcard_p_wrong(0.1, 2, 32, 5, v);
        assert!(none <= 0.033 && none > 0.032, "{none}");
        assert!(wrong < 1e-22 && wrong > 0.0, "{wrong}");
        // Chunk false-validity is ((2^18 + 1) / 2^32)^5 ≈ 2^−70.
        let f = postcard_false_chunk(32, 5, v);
        assert!((f / 2f64.powi(-70) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn countmin_bound() {
        assert_eq!(countmin_overestimate_bound(1e6, 1 << 20, 2, 0.0), 1.0);
        let b = countmin_overestimate_bound(1e6, 1 << 20, 2, 10.0);
        let want = (2e6 / (1048576.0 * 10.0f64)).powi(2);
        assert!((b - want).abs() < 1e-15);
        assert_eq!(countmin_overestimate_bound(1e9, 16, 4, 1.0), 1.0);
    }
}
