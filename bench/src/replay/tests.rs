use dta_proto::wire::report::{parse_report, Primitive};

use super::*;
use crate::gen::{Generator, Mix, Scenario};
use crate::trace::Trace;

fn trace(sc: &Scenario, n: usize) -> Trace {
    Trace::generate(&mut Generator::new(sc), n).unwrap()
}

#[test]
fn memory_replay_translates_everything_on_two_workers() {
    let sc = Scenario {
        mix: Mix::parse("all").unwrap(),
        slots_log2: 14,
        chunks_log2: 12,
        ..Scenario::default()
    };
    let t = trace(&sc, 4000);
    for workers in [1, 2] {
        let r = replay_memory(
            &sc,
            &t,
            &MemOptions {
                workers,
                pin: false,
                ..MemOptions::default()
            },
        )
        .unwrap();
        assert_eq!(r.reports, 4000);
        assert_eq!(r.handoffs, 0, "sharding follows ownership");
        assert_eq!(r.rnic_errors, 0);
        assert!(r.translated + r.dropped <= r.reports);
        // Duplicate postcard hops of a re-sent path may be dropped; nothing else.
        assert!(r.translated >= 3500, "{r:?}");
        assert!(r.rnic_executed > 0 && r.frames >= r.rnic_executed);
        assert_eq!(r.latency.unwrap().count, r.translated + r.dropped);
    }
}

#[test]
fn shard_respects_list_ownership() {
    let sc = Scenario {
        mix: Mix::parse("loss,cong").unwrap(),
        ..Scenario::default()
    };
    let t = trace(&sc, 500);
    let s = shard(&sc, &t, 2);
    assert_eq!(s[0].len() + s[1].len(), 500);
    for (w, tr) in s.iter().enumerate() {
        for i in 0..tr.len() {
            let r = parse_report(tr.payload(i), &sc.parse_config()).unwrap();
            let Primitive::Append { list, .. } = r.primitive else {
                panic!()
            };
            assert_eq!(list as usize % 2, w);
        }
    }
}
