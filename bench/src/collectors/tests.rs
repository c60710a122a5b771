use super::*;

#[test]
fn truth_of_a_trace() {
    let sc = scenario();
    let t = Trace::generate(&mut crate::gen::Generator::new(&sc), 3000).unwrap();
    let tr = Truth::of(&t, &sc.parse_config()).unwrap();
    assert_eq!(tr.reports, 3000, "the mix has only the three stored kinds");
    assert!(!tr.paths.is_empty() && !tr.counters.is_empty() && tr.appends > 0);
    assert_eq!(tr.lists.values().sum::<u64>(), tr.appends);
    assert_eq!(
        tr.entries.values().map(|&c| c as u64).sum::<u64>(),
        tr.appends
    );
    let s = Truth::sample(&tr.paths, 50, 1);
    assert_eq!(s.len(), 50);
    assert_eq!(s, Truth::sample(&tr.paths, 50, 1), "stable");
    let mut d = s.clone();
    d.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    d.dedup();
    assert_eq!(d.len(), 50, "distinct");
    assert_eq!(
        Truth::sample(&tr.paths, usize::MAX, 1).len(),
        tr.paths.len()
    );
}

#[test]
fn latency_quantiles() {
    let l = LookupLatency::of((1..=100).map(|i| i * 1000).collect());
    assert_eq!(
        (l.count, l.p50_us, l.p99_us, l.max_us),
        (100, 50.0, 99.0, 100.0)
    );
    assert_eq!(LookupLatency::of(Vec::new()).count, 0);
}

#[test]
fn holds_is_complete_only_when_everything_matches() {
    let mut h = Holds {
        keywrite_keys: Some(3),
        keywrite_expected: 3,
        counter_keys: None,
        counter_expected: 2,
        append_entries: 5,
        append_expected: 5,
        lookups: 2,
        lookups_ok: 2,
        ..Holds::default()
    };
    assert!(h.complete());
    h.lookups_ok = 1;
    assert!(!h.complete());
    h.lookups_ok = 2;
    h.lists_off = 1;
    assert!(!h.complete());
}
