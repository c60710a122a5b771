//! R_Keys come from the kernel's random source: two starts of the same configuration hand
//! out different keys, and the keys of one start are not a sequence (they were `0x95, 0x1d0,
//! ...`, `next_key += 0x3b`, the same on every start).

use dta_collector::{Collector, CollectorConfig};

fn start() -> Collector {
    let toml = r#"
[collector]
roce = "127.0.0.1:0"
hugepages = false
[[store]]
name = "a"
kind = "keywrite"
slots = 1024
[[store]]
name = "b"
kind = "keyincrement"
slots = 1024
[[store]]
name = "c"
kind = "append"
lists = 2
capacity = 16
batch = 4
[[store]]
name = "d"
kind = "keywrite"
slots = 1024
"#;
    Collector::start(CollectorConfig::from_toml(toml).unwrap()).unwrap()
}

#[test]
fn rkeys_differ_between_starts_and_are_not_sequential() {
    let keys = || -> Vec<u32> {
        let c = start();
        let k = c.stores.iter().map(|s| s.meta.rkey).collect();
        c.shutdown();
        k
    };
    let (a, b) = (keys(), keys());
    assert_eq!(a.len(), 4);
    for k in a.iter().chain(&b) {
        assert!(*k >= 0x100, "{k:#x}");
    }
    assert!(a.iter().all(|k| !b.contains(k)), "{a:x?} {b:x?}");
    // Under the old scheme consecutive keys differed by 0x13b (slot + 0x3b); now the 24 bits
    // above the slot byte are random: no constant step, and far from neighbours.
    for ks in [&a, &b] {
        let steps: Vec<u32> = ks.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.iter().any(|s| *s != steps[0]), "{ks:x?}");
        assert!(
            ks.windows(2).all(|w| (w[1] >> 8).abs_diff(w[0] >> 8) > 1),
            "{ks:x?}"
        );
    }
}
