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

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use dta_collector::config::{
    CollectorConfig, DeviceSection, StaticPeer, StoreConfig, StoreKindConfig,
};
use dta_collector::Collector;
use dta_proto::sketch::{Sketch, SketchKind, SketchShape};
use dta_proto::wire::nack::NackRepr;
use dta_proto::Key;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

const SWITCHES: u32 = 100;
const EPOCHS: u32 = 4;
const CM_ID: u16 = 1;
const HLL_ID: u16 = 2;
/// Columns per report: 64 Count-Min columns (1,024 bytes of cells), 256 HLL registers.
const CM_COLS_PER_REPORT: u32 = 64;
const HLL_COLS_PER_REPORT: u32 = 256;

fn cm_shape() -> SketchShape {
    SketchShape::new(SketchKind::CountMin, 4, 1024, 4).unwrap()
}

fn hll_shape() -> SketchShape {
    SketchShape::new(SketchKind::HyperLogLog, 1, 1024, 1).unwrap()
}

fn free_port(ip: Ipv4Addr) -> u16 {
    UdpSocket::bind(SocketAddrV4::new(ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
fn switch_sketches(s: u32, epoch: u32) -> (Sketch, Sketch) {
    let mut rng = Rng(0x9E37_79B9 ^ ((s as u64) << 20) ^ epoch as u64);
    let mut cm = Sketch::new(cm_shape());
    let mut hll = Sketch::new(hll_shape());
    for _ in 0..300 {
        let flow = (rng.next() % 20_000) as u32 ^ (epoch << 24);
        let key = Key::new(&flow.to_be_bytes()).unwrap();
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
    _dir: std::path::PathBuf,
}

impl System {
    fn start() -> System {
        let dir = std::env::temp_dir().join(format!(
            "dta-sketch-{}-{}",
            std::process::id(),
            free_port(Ipv4Addr::LOCALHOST)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let meta = dir.join("collector.json");
        let c_ip = Ipv4Addr::new(127, 0, 0, 1);
        let t_ip = Ipv4Addr::new(127, 0, 0, 2);
        let roce_t = SocketAddrV4::new(t_ip, free_port(t_ip));
        let sketch = |name: &str, sketch_id, sketch, columns| StoreConfig {
            name: name.into(),
            port: None,
            cm_allow: None,
            kind: StoreKindConfig::Sketch {
                sketch_id,
                sketch,
                rows: None,
                columns,
                cell_width: None,
                batch: None,
                epochs: 2,
            },
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
        t.sketch.expected_switches = SWITCHES as u16;
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

/// The reports one switch sends for one sketch, from column `from` to the end.
fn reports_from(id: u16, s: &Sketch, switch: u32, epoch: u32, from: u32) -> Vec<Vec<u8>> {
    let per = if id == CM_ID {
        CM_COLS_PER_REPORT
    } else {
        HLL_COLS_PER_REPORT
    };
    let cols = s.shape().columns;
    // Resends restart at the column named, then continue on the regular report grid.
    let mut out = Vec::new();
    let mut c = from;
    while c < cols {
        let n = (per - c % per).min(cols - c);
        out.push(report(id, s, switch, epoch, c, n));
        c += n;
    }
    out
}

fn run(loss: f64) {
    let mut sys = System::start();
    let mut rng = Rng(0xD7A_5EED);
    let (mut lost, mut resent) = (0u64, 0u64);
    for epoch in 1..=EPOCHS {
        let sketches: Vec<(Sketch, Sketch)> =
            (0..SWITCHES).map(|s| switch_sketches(s, epoch)).collect();
        let mut direct_cm = Sketch::new(cm_shape());
        let mut direct_hll = Sketch::new(hll_shape());
        for (cm, hll) in &sketches {
            direct_cm.merge(cm);
            direct_hll.merge(hll);
        }
        // Interleave switches report by report, as their sketches stream in.
        let mut queues: Vec<std::collections::VecDeque<Vec<u8>>> = sketches
            .iter()
            .enumerate()
            .map(|(s, (cm, hll))| {
                let mut q: std::collections::VecDeque<Vec<u8>> =
                    reports_from(CM_ID, cm, 1000 + s as u32, epoch, 0).into();
                q.extend(reports_from(HLL_ID, hll, 1000 + s as u32, epoch, 0));
                q
            })
            .collect();
        while queues.iter().any(|q| !q.is_empty()) {
            for q in queues.iter_mut() {
                if let Some(b) = q.pop_front() {
                    if rng.chance(loss) {
                        lost += 1;
                    } else {
                        sys.send(&b);
                    }
                }
            }
        }
        // Answer NACKs until both sketches of the epoch are complete.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last_resend: HashMap<(u16, u32), (u32, Instant)> = HashMap::new();
        let mut buf = [0u8; 64];
        let complete = |sys: &System| {
            ["cm", "hll"].iter().all(|n| {
                let v = sys.collector.store(n).unwrap().sketch().unwrap();
                let c = v.read_epoch(epoch).completeness();
                c.complete == c.columns && c.expected == SWITCHES as u16
            })
        };
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
            let Ok(n) = sys.nacks.recv(&mut buf) else {
                continue;
            };
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
                // Left over from the previous epoch (a duplicate NACK the reporter skipped).
                assert!(e < epoch, "a NACK for a future epoch");
                continue;
            }
            // A burst of NACKs for one loss: resend once per column per few milliseconds.
            let now = Instant::now();
            if let Some(&(col, at)) = last_resend.get(&(sketch_id, switch)) {
                if col == expected_column && now.duration_since(at) < Duration::from_millis(15) {
                    continue;
                }
            }
            last_resend.insert((sketch_id, switch), (expected_column, now));
            let (cm, hll) = &sketches[(switch - 1000) as usize];
            let s = if sketch_id == CM_ID { cm } else { hll };
            for b in reports_from(sketch_id, s, switch, epoch, expected_column) {
                resent += 1;
                if rng.chance(loss) {
                    lost += 1;
                } else {
                    sys.send(&b);
                }
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
        let key = Key::new(&(97u32 ^ (epoch << 24)).to_be_bytes()).unwrap();
        assert_eq!(cm.point(&key, epoch), direct_cm.point(&key));
        assert_eq!(cm.latest_epoch(), Some(epoch));
    }
    let want = EPOCHS as u64 * SWITCHES as u64 * 2048;
    sys.translator
        .wait_for(Duration::from_secs(5), |c| c.sketch_columns_merged >= want);
    let c = sys.translator.counters();
    println!(
        "loss {loss}: {lost} datagrams lost, {resent} resent; translator: {} merged columns, \
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
        2 * EPOCHS as u64,
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
    run(0.0);
}

#[test]
fn one_percent_report_loss_is_recovered_by_column_nacks() {
    run(0.01);
}
