//! 2 workers vs 1 on the in-memory pipeline, measured fairly on a shared machine.
//!
//! The trace (Key-Write N=2 INT paths + Append loss events, as `dta bench micro`) is replayed
//! through the production pipeline (`dta_bench::replay::replay_memory`, pipeline only: frames
//! are counted and dropped) on 1 and on 2 pinned workers, alternating which goes first in each
//! round. For each run it prints wall reports/s and each configuration's worker CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), from which:
//! - **wall ratio** = 2-worker reports/s ÷ 1-worker reports/s (what the machine gave us);
//! - **CPU ns/report** = worker CPU time ÷ reports, and **core share** = worker CPU ÷ (wall ×
//!   workers), i.e. how much of a core each worker actually got;
//! - **projected ratio** = 2 × (1-worker CPU ns/report ÷ 2-worker CPU ns/report): the ratio on
//!   two cores given to the workers alone, if nothing but CPU is shared (any cost of sharing —
//!   cache lines, memory bandwidth, hand-offs — shows up as a higher 2-worker ns/report).
//!
//! ```sh
//! cargo run -p dta-bench --example scaling -- 1000000 5
//! #                                          reports rounds
//! ```

use dta_bench::gen::{Generator, Mix, Scenario};
use dta_bench::replay::{replay_memory, MemOptions, ReplayResult, RnicMode};
use dta_bench::trace::Trace;

fn once(sc: &Scenario, t: &Trace, workers: usize, pin: bool) -> ReplayResult {
    replay_memory(
        sc,
        t,
        &MemOptions {
            workers,
            loops: 1,
            rnic: RnicMode::Off,
            pin,
            ..MemOptions::default()
        },
    )
    .expect("replay")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let pin = !args.iter().any(|a| a == "--no-pin");
    let sc = Scenario {
        mix: Mix::parse("kw=1,loss=1").expect("valid mix"),
        ..Scenario::default()
    };
    let t = Trace::generate(&mut Generator::new(&sc), n).expect("trace");
    println!(
        "{n} reports (Key-Write N=2 + Append), pipeline only, pinned={pin}, {rounds} rounds; load {}",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    println!(
        "round | workers | M rep/s wall | worker CPU s | CPU ns/report | core share | handoffs"
    );
    let (mut wall, mut proj) = (Vec::new(), Vec::new());
    let (mut ns1s, mut ns2s) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order: [usize; 2] = if round % 2 == 0 { [1, 2] } else { [2, 1] };
        let mut r = [None, None];
        for w in order {
            let x = once(&sc, &t, w, pin);
            println!(
                "{round:>5} | {w:>7} | {:>12.3} | {:>12.3} | {:>13.1} | {:>10.2} | {}",
                x.reports_per_sec / 1e6,
                x.worker_cpu_secs,
                x.worker_cpu_secs * 1e9 / x.reports as f64,
                x.worker_cpu_secs / (x.secs * w as f64),
                x.handoffs
            );
            r[w - 1] = Some(x);
        }
        let (one, two) = (r[0].take().expect("ran"), r[1].take().expect("ran"));
        let ns1 = one.worker_cpu_secs * 1e9 / one.reports as f64;
        let ns2 = two.worker_cpu_secs * 1e9 / two.reports as f64;
        wall.push(two.reports_per_sec / one.reports_per_sec);
        proj.push(2.0 * ns1 / ns2);
        ns1s.push(ns1);
        ns2s.push(ns2);
    }
    println!(
        "median: wall ratio {:.2}; CPU ns/report 1 worker {:.1}, 2 workers {:.1}; projected ratio on two dedicated cores {:.2} (max wall ratio {:.2})",
        median(&mut wall.clone()),
        median(&mut ns1s),
        median(&mut ns2s),
        median(&mut proj),
        wall.iter().cloned().fold(0.0, f64::max)
    );
}
