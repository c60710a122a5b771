//! Sketch-Merge end to end over real loopback sockets (issue 15): 100 reporting switches send
//! their Count-Min and HyperLogLog sketches column by column to a translator thread, which
//! merges them and writes the network-wide sketches into a software-RNIC collector; the
//! collector's query engine reads them back.
//!
//! For 4 epochs, the merged sketches in collector memory must be bit-identical to merging the
//! switches' sketches directly, and every column must be merged from all 100 switches. The
//! lossy run drops 1 % of the reporters' datagrams (first sends and resends alike); the
//! translator's sketch-column NACKs (a gap, or the flush timer's straggler round) make the
//! test's reporters resend from the column named, and completeness still reaches 100 %.
//!
//! The Tofino-profile run does what `p4/reporter/dta_sketch_reporter.p4` does: stores
//! configured `hash = "tofino"`, sketches keyed by the 13-byte IPv4 5-tuple hashed with the
//! profile a switch computes (bare CRCs, tabulated HyperLogLog), one column per report.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use dta_collector::config::{
    CollectorConfig, DeviceSection, StaticPeer, StoreConfig, StoreKindConfig,
};
use dta_collector::Collector;
use dta_proto::sketch::{Sketch, SketchHash, SketchKind, SketchShape};
use dta_proto::wire::nack::NackRepr;
use dta_proto::Key;
use dta_tests::harness::free_port;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

const SWITCHES: u32 = 100;
const CM_ID: u16 = 1;
const HLL_ID: u16 = 2;

/// What the reporting switches are.
#[derive(Clone, Copy)]
struct Reporters {
    /// The sketches' hash profile (and the stores').
    hash: SketchHash,
    epochs: u32,
    /// Columns per report: Count-Min, HyperLogLog.
    per_report: (u32, u32),
    /// Datagrams lost (first sends and resends alike).
    loss: f64,
}

/// Software reporters: 4 epochs; 64 Count-Min columns a report (1,024 bytes of cells), 256
/// HLL registers.
const SOFTWARE: Reporters = Reporters {
    hash: SketchHash::Independent,
    epochs: 4,
    per_report: (64, 256),
    loss: 0.0,
};

fn cm_shape(h: SketchHash) -> SketchShape {
    SketchShape::new(SketchKind::CountMin, 4, 1024, 4)
        .unwrap()
        .with_hash(h)
}

fn hll_shape(h: SketchHash) -> SketchShape {
    SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1)
        .unwrap()
        .with_hash(h)
}

/// Flow `flow`'s key: 4 bytes for software reporters, the 5-tuple a Tofino reporter hashes.
fn flow_key(flow: u32, h: SketchHash) -> Key {
    match h {
        SketchHash::Independent => Key::new(&flow.to_be_bytes()).unwrap(),
        SketchHash::Tofino => {
            let [a, b, c, d] = flow.to_be_bytes();
            Key::new(&[10, a, b, 1, 10, 0, c, 2, 6, d, 0x10, 0x01, 0xBB]).unwrap()
        }
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Switch `s`'s sketches in `epoch`: flows drawn from a shared pool (so switches overlap), a
/// few heavy ones.
fn switch_sketches(s: u32, epoch: u32, h: SketchHash) -> (Sketch, Sketch) {
    let mut rng = Rng(0x9E37_79B9 ^ ((s as u64) << 20) ^ epoch as u64);
    let mut cm = Sketch::new(cm_shape(h));
    let mut hll = Sketch::new(hll_shape(h));
    for _ in 0..300 {
        let flow = (rng.next() % 20_000) as u32 ^ (epoch << 24);
        let key = flow_key(flow, h);
        let pkts = if flow.is_multiple_of(97) {
            1000
        } else {
            1 + (rng.next() % 5) as u32
        };
        cm.update(&key, pkts);
        hll.update(&key, 1);
    }
    (cm, hll)
}

struct System {
    collector: Collector,
    translator: Translator,
    sock: UdpSocket,
    nacks: UdpSocket,
    sent: u64,
    _dir: dta_tests::scratch::ScratchDir,
}

impl System {
    fn start(hash: SketchHash) -> System {
        System::start_with(hash, 2, SWITCHES as u16)
    }

    /// A system whose stores keep `slots` epochs, merging `expected` switches.
    fn start_with(hash: SketchHash, slots: u32, expected: u16) -> System {
        let dir = dta_tests::scratch::ScratchDir::new("dta-sketch");
        let meta = dir.path().join("collector.json");
        let c_ip = Ipv4Addr::new(127, 0, 0, 1);
        let t_ip = Ipv4Addr::new(127, 0, 0, 2);
        let roce_t = SocketAddrV4::new(t_ip, free_port(t_ip));
        let sketch = |name: &str, sketch_id, sketch, columns| StoreConfig {
            name: name.into(),
            port: None,
            cm_allow: None,
            kind: StoreKindConfig::new(dta_collector::config::sketch_kind(
                sketch_id, sketch, None, columns, None, None, slots, hash,
            )),
        };
        let collector = Collector::start(CollectorConfig {
            collector: DeviceSection {
                roce: SocketAddrV4::new(c_ip, 0),
                metadata_file: Some(meta.clone()),
                hugepages: false,
                ..DeviceSection::default()
            },
            static_peers: vec![StaticPeer {
                roce: roce_t,
                workers: 1,
                qpn_base: 0x200,
                mac: "02:00:00:00:00:01".into(),
            }],
            stores: vec![
                sketch("cm", CM_ID, SketchKind::CountMin, 1024),
                sketch("hll", HLL_ID, SketchKind::HyperLogLog, 1024),
            ],
            export: Default::default(),
            pull: None,
        })
        .expect("collector starts");
        let nacks = UdpSocket::bind("127.0.0.1:0").unwrap();
        nacks
            .set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut t = TranslatorConfig::default();
        t.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        t.translator.roce = roce_t;
        t.translator.nack_port = nacks.local_addr().unwrap().port();
        t.sketch.expected_switches = expected;
        t.sketch.flush_delay_ms = 50;
        // The reporters pace themselves by the translator's published counters.
        t.translator.stats_interval_ms = 1;
        t.collectors = vec![CollectorSection::with_metadata("c", meta)];
        let translator = Translator::start(t).expect("translator starts");
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(translator.report_addr).unwrap();
        System {
            collector,
            translator,
            sock,
            nacks,
            sent: 0,
            _dir: dir,
        }
    }

    /// Sends one datagram, at most a few hundred ahead of the translator.
    fn send(&mut self, b: &[u8]) {
        while self.sent >= self.translator.counters().rx_datagrams + 300 {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.sock.send(b).unwrap();
        self.sent += 1;
    }
}

/// The report of `n` columns of `s` from `col`, as switch `switch` sends it.
fn report(id: u16, s: &Sketch, switch: u32, epoch: u32, col: u32, n: u32) -> Vec<u8> {
    s.column_report(id, switch, epoch, col, n)
        .expect("columns within the sketch")
}

/// One switch's export of one sketch, as a reporter does it (the P4 sketch reporter's
/// cursor): the next report starts at `next`; a NACK naming an earlier column rewinds it.
struct Cursor {
    id: u16,
    switch: u32,
    next: u32,
    /// The column after the furthest one sent (reports below it are resends).
    high: u32,
}

impl Cursor {
    /// The next report (`per` columns on the report grid) and whether it is a resend, or
    /// `None` at the sketch's end.
    fn take(&mut self, r: Reporters, s: &Sketch, epoch: u32) -> Option<(Vec<u8>, bool)> {
        let per = if self.id == CM_ID {
            r.per_report.0
        } else {
            r.per_report.1
        };
        let cols = s.shape().columns;
        let c = self.next;
        if c >= cols {
            return None;
        }
        // After a rewind the report ends on the grid again.
        let n = (per - c % per).min(cols - c);
        self.next += n;
        let resend = c < self.high;
        self.high = self.high.max(self.next);
        Some((report(self.id, s, self.switch, epoch, c, n), resend))
    }
}

fn run(r: Reporters) {
    let loss = r.loss;
    let mut sys = System::start(r.hash);
    sys.nacks.set_nonblocking(true).unwrap();
    let mut rng = Rng(0xD7A_5EED);
    let (mut lost, mut resent, mut rewinds) = (0u64, 0u64, 0u64);
    for epoch in 1..=r.epochs {
        let sketches: Vec<(Sketch, Sketch)> = (0..SWITCHES)
            .map(|s| switch_sketches(s, epoch, r.hash))
            .collect();
        let mut direct_cm = Sketch::new(cm_shape(r.hash));
        let mut direct_hll = Sketch::new(hll_shape(r.hash));
        for (cm, hll) in &sketches {
            direct_cm.merge(cm);
            direct_hll.merge(hll);
        }
        // Per switch a Count-Min and a HyperLogLog cursor; the switches interleave report by
        // report, as their sketches stream in.
        let mut cursors: Vec<Cursor> = (0..SWITCHES)
            .flat_map(|s| {
                [CM_ID, HLL_ID].map(|id| Cursor {
                    id,
                    switch: 1000 + s,
                    next: 0,
                    high: 0,
                })
            })
            .collect();
        let sketch_of = |c: &Cursor| {
            let (cm, hll) = &sketches[(c.switch - 1000) as usize];
            if c.id == CM_ID {
                cm
            } else {
                hll
            }
        };
        let complete = |sys: &System| {
            ["cm", "hll"].iter().all(|n| {
                let v = sys.collector.store(n).unwrap().sketch().unwrap();
                let c = v.read_epoch(epoch).completeness();
                c.complete == c.columns && c.expected == SWITCHES as u16
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 64];
        while !complete(&sys) {
            assert!(
                Instant::now() < deadline,
                "epoch {epoch} incomplete: {:?} / {:?}; translator {:?}",
                sys.collector
                    .store("cm")
                    .unwrap()
                    .sketch()
                    .unwrap()
                    .read_epoch(epoch)
                    .completeness(),
                sys.collector
                    .store("hll")
                    .unwrap()
                    .sketch()
                    .unwrap()
                    .read_epoch(epoch)
                    .completeness(),
                sys.translator.counters()
            );
            // One round: a report from every cursor that has one.
            let mut sent_any = false;
            for c in cursors.iter_mut() {
                let Some((b, resend)) = c.take(r, sketch_of(c), epoch) else {
                    continue;
                };
                sent_any = true;
                resent += resend as u64;
                if rng.chance(loss) {
                    lost += 1;
                } else {
                    sys.send(&b);
                }
            }
            // NACKs rewind the cursor they name.
            let mut got_any = false;
            while let Ok(n) = sys.nacks.recv(&mut buf) {
                got_any = true;
                let Ok(NackRepr::SketchColumn {
                    sketch_id,
                    switch,
                    epoch: e,
                    expected_column,
                }) = NackRepr::parse(&buf[..n])
                else {
                    panic!("not a sketch NACK: {:02x?}", &buf[..n]);
                };
                if e != epoch {
                    // Left over from the previous epoch (a duplicate NACK).
                    assert!(e < epoch, "a NACK for a future epoch");
                    continue;
                }
                let i = (switch - 1000) as usize * 2 + (sketch_id != CM_ID) as usize;
                let c = &mut cursors[i];
                assert_eq!((c.id, c.switch), (sketch_id, switch));
                if expected_column < c.next {
                    c.next = expected_column;
                    rewinds += 1;
                }
            }
            if !sent_any && !got_any {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Bit-identical to merging the switches' sketches directly; every column from all
        // 100 switches.
        let cm = sys.collector.store("cm").unwrap().sketch().unwrap();
        let got = cm.read_epoch(epoch);
        assert_eq!(got.sketch, direct_cm, "epoch {epoch}: merged Count-Min");
        assert!(got.merged.iter().all(|&m| m == SWITCHES as u16));
        let hll = sys.collector.store("hll").unwrap().sketch().unwrap();
        let got = hll.read_epoch(epoch);
        assert_eq!(got.sketch, direct_hll, "epoch {epoch}: merged HyperLogLog");
        assert_eq!(got.cardinality(), direct_hll.cardinality());
        // The query engine answers from memory: Count-Min never below the direct sketch's
        // estimate's truth source (the direct sketch is the same bits).
        let key = flow_key(97u32 ^ (epoch << 24), r.hash);
        assert_eq!(cm.point(&key, epoch), direct_cm.point(&key));
        assert_eq!(cm.layout.shape().hash, r.hash, "the store header's profile");
        assert_eq!(cm.latest_epoch(), Some(epoch));
    }
    let want = r.epochs as u64 * SWITCHES as u64 * 2048;
    sys.translator
        .wait_for(Duration::from_secs(5), |c| c.sketch_columns_merged >= want);
    let c = sys.translator.counters();
    println!(
        "loss {loss}: {lost} datagrams lost, {resent} resent after {rewinds} rewinds; translator: {} merged columns, \
         {} gap NACKs, {} straggler NACKs, {} gap drops, {} duplicates, {} complete batches, \
         {} partial",
        c.sketch_columns_merged,
        c.sketch_gap_nacks,
        c.sketch_straggler_nacks,
        c.drop_sketch_gap,
        c.drop_sketch_duplicate,
        c.sketch_batches_complete,
        c.sketch_batches_partial
    );
    assert_eq!(
        c.sketch_epochs,
        2 * r.epochs as u64,
        "one start per sketch and epoch"
    );
    assert_eq!(
        c.sketch_columns_merged, want,
        "every column of every switch merged exactly once"
    );
    assert_eq!(
        c.rx_datagrams,
        c.translated + c.dropped(),
        "every report merged or counted as dropped"
    );
    assert_eq!(c.drop_sketch_late, 0);
    if loss == 0.0 {
        assert_eq!(lost, 0);
        // Without loss no report skips a column. (A reporter stalled longer than the flush
        // delay is NACKed as a straggler and its resends are duplicates: counted, harmless.)
        assert_eq!(c.sketch_gap_nacks, 0, "{c:?}");
        assert_eq!(c.dropped(), c.drop_sketch_duplicate, "{c:?}");
    } else {
        assert!(
            lost > 0 && resent > 0,
            "the lossy run lost and resent reports"
        );
        assert!(c.sketch_gap_nacks + c.sketch_straggler_nacks > 0);
    }
    sys.translator.shutdown();
    sys.collector.shutdown();
}

#[test]
fn merged_sketches_are_bit_identical_over_loopback() {
    run(SOFTWARE);
}

#[test]
fn one_percent_report_loss_is_recovered_by_column_nacks() {
    run(Reporters {
        loss: 0.01,
        ..SOFTWARE
    });
}

/// What the Tofino sketch reporter sends (one column a report, the Tofino profile, 5-tuple
/// keys), with 1 % loss: bit-identical and complete, and the queries hash as the switches did.
#[test]
fn tofino_reporters_one_column_a_report_merge_bit_identically() {
    run(Reporters {
        hash: SketchHash::Tofino,
        epochs: 2,
        per_report: (1, 1),
        loss: 0.01,
    });
}

/// Issue 28: switches whose epoch boundaries are skewed (each starts epoch e+1 a few report
/// rounds apart from the others, so fast switches send epoch e+1 while slow ones still send
/// epoch e). Before, the first report of epoch e+1 ended epoch e for everyone and the slow
/// switches' last columns were dropped as late; now the epoch moves on by agreement, the early
/// reports of the next epoch are held, and every epoch merges completely and bit-identically.
#[test]
fn skewed_epoch_boundaries_lose_nothing() {
    const N: u32 = 20;
    const EPOCHS: u32 = 3;
    const ROUNDS: u32 = 24; // an epoch's length in report rounds (a sketch takes 16)
    let r = SOFTWARE;
    let mut sys = System::start_with(r.hash, 4, N as u16);
    sys.nacks.set_nonblocking(true).unwrap();
    let sketches: Vec<Vec<(Sketch, Sketch)>> = (1..=EPOCHS)
        .map(|e| (0..N).map(|s| switch_sketches(s, e, r.hash)).collect())
        .collect();
    // Per epoch, per switch, a Count-Min and a HyperLogLog cursor.
    let mut cursors: Vec<Vec<Cursor>> = (1..=EPOCHS)
        .map(|_| {
            (0..N)
                .flat_map(|s| {
                    [CM_ID, HLL_ID].map(|id| Cursor {
                        id,
                        switch: 1000 + s,
                        next: 0,
                        high: 0,
                    })
                })
                .collect()
        })
        .collect();
    let skew = |s: u32| (s * 7) % 12;
    let complete = |sys: &System, epoch: u32| {
        ["cm", "hll"].iter().all(|n| {
            let v = sys.collector.store(n).unwrap().sketch().unwrap();
            let c = v.read_epoch(epoch).completeness();
            c.complete == c.columns && c.expected == N as u16
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 64];
    let mut round = 0u32;
    while !(1..=EPOCHS).all(|e| complete(&sys, e)) {
        assert!(
            Instant::now() < deadline,
            "incomplete after {round} rounds: {:?}; translator {:?}",
            (1..=EPOCHS)
                .map(|e| sys
                    .collector
                    .store("cm")
                    .unwrap()
                    .sketch()
                    .unwrap()
                    .read_epoch(e)
                    .completeness())
                .collect::<Vec<_>>(),
            sys.translator.counters()
        );
        let mut sent_any = false;
        for (ei, per_epoch) in cursors.iter_mut().enumerate() {
            let epoch = ei as u32 + 1;
            for c in per_epoch.iter_mut() {
                let s = c.switch - 1000;
                if round < (epoch - 1) * ROUNDS + skew(s) {
                    continue; // this switch's epoch has not begun
                }
                let (cm, hll) = &sketches[ei][s as usize];
                let sk = if c.id == CM_ID { cm } else { hll };
                if let Some((b, _)) = c.take(r, sk, epoch) {
                    sent_any = true;
                    sys.send(&b);
                }
            }
        }
        let mut got_any = false;
        while let Ok(n) = sys.nacks.recv(&mut buf) {
            got_any = true;
            let Ok(NackRepr::SketchColumn {
                sketch_id,
                switch,
                epoch,
                expected_column,
            }) = NackRepr::parse(&buf[..n])
            else {
                panic!("not a sketch NACK: {:02x?}", &buf[..n]);
            };
            assert!((1..=EPOCHS).contains(&epoch), "a NACK for epoch {epoch}");
            let i = (switch - 1000) as usize * 2 + (sketch_id != CM_ID) as usize;
            let c = &mut cursors[epoch as usize - 1][i];
            c.next = c.next.min(expected_column);
        }
        round += 1;
        if !sent_any && !got_any {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for epoch in 1..=EPOCHS {
        let mut direct_cm = Sketch::new(cm_shape(r.hash));
        let mut direct_hll = Sketch::new(hll_shape(r.hash));
        for (cm, hll) in &sketches[epoch as usize - 1] {
            direct_cm.merge(cm);
            direct_hll.merge(hll);
        }
        let cm = sys.collector.store("cm").unwrap().sketch().unwrap();
        let got = cm.read_epoch(epoch);
        assert_eq!(got.sketch, direct_cm, "epoch {epoch}: merged Count-Min");
        assert!(got.merged.iter().all(|&m| m == N as u16));
        let hll = sys.collector.store("hll").unwrap().sketch().unwrap();
        assert_eq!(
            hll.read_epoch(epoch).sketch,
            direct_hll,
            "epoch {epoch}: HLL"
        );
    }
    let want = EPOCHS as u64 * N as u64 * 2048;
    sys.translator
        .wait_for(Duration::from_secs(5), |c| c.sketch_columns_merged >= want);
    let c = sys.translator.counters();
    assert_eq!(c.sketch_columns_merged, want, "{c:?}");
    assert_eq!(c.drop_sketch_late, 0, "{c:?}");
    assert_eq!(c.rx_datagrams, c.translated + c.dropped(), "{c:?}");
    sys.translator.shutdown();
    sys.collector.shutdown();
}
