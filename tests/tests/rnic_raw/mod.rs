//! Shared by `rnic_af_xdp.rs` and `rnic_dpdk.rs`: a translator on kernel UDP in namespace A
//! connects over RDMA_CM to a collector whose software RNIC runs on a raw-frame backend on
//! veth B (namespace B); Key-Write and Append reports land and queries answer from the
//! collector's memory.
//!
//! Namespace A drops unicast IP in link-layer broadcast frames
//! (`drop_unicast_in_l2_multicast`), so every answer (REP, ACKs, the metadata SEND) must be
//! addressed to the translator's real MAC, which the collector was never told: it learns it
//! from the requests (`Backend::answer_to_sender_mac`).

#![allow(dead_code)]

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use dta_collector::allow::Cidr;
use dta_collector::config::{CollectorConfig, DeviceSection, RnicIo, StoreConfig, StoreKindConfig};
use dta_collector::query::append::{ListReader, Start};
use dta_collector::query::keywrite::{KeyWriteAnswer, KeyWriteView, Vote};
use dta_collector::Collector;
use dta_io::netns::{Netns, ADDR_A, ADDR_B, MAC_B};
use dta_proto::hash::{HashProfile, KeyHasher};
use dta_proto::layout::{AppendFormat, AppendLayout, KeyWriteLayout};
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::{Primitive, Profile, Report};
use dta_proto::{Key, Value};
use dta_tests::harness::extended_header;
use dta_translator::config::{CollectorSection, TranslatorConfig};
use dta_translator::Translator;

/// Prints `SKIP: rnic over BACKEND: why`.
pub fn skip(backend: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: rnic over {backend}: {why}");
}

/// Runs `f` on a thread inside namespace `ns` (threads it starts stay there).
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        dta_io::netns::enter_netns(&ns)?;
        f()
    })
    .join()
    .map_err(|_| "thread panicked".to_string())?
}

const KW_SLOTS: u32 = 4096;

/// The collector of the test: the software RNIC at 10.77.0.2:4791 with MAC B, a Key-Write
/// store `kw` (port 1337) and an Append store `ap` (port 1338); `rnic` sets its backend.
pub fn collector_config(rnic: impl FnOnce(&mut RnicIo)) -> CollectorConfig {
    let mut c = CollectorConfig {
        collector: DeviceSection {
            roce: SocketAddrV4::new(ADDR_B, dta_proto::consts::ROCEV2_PORT),
            mac: MAC_B.into(),
            hugepages: false,
            // The translator in namespace A (not loopback, not a static peer).
            cm_allow: Some(vec![Cidr::host(ADDR_A)]),
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: vec![
            StoreConfig {
                name: "kw".into(),
                port: Some(1337),
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::KeyWrite {
                    slots: KW_SLOTS,
                    slot_size: 16,
                    hash: HashProfile::Independent,
                })
                .with_redundancy(2),
            },
            StoreConfig {
                name: "ap".into(),
                port: Some(1338),
                cm_allow: None,
                kind: StoreKindConfig::new(StoreKind::Append {
                    lists: 2,
                    first_list: 0,
                    capacity: 256,
                    entry_size: 4,
                    batch: 8,
                    format: AppendFormat::Sequenced,
                    list_stride: 0,
                }),
            },
        ],
        export: Default::default(),
        pull: None,
    };
    rnic(&mut c.collector.rnic);
    c
}

/// Runs the test: veth pair `PREFIX-a`/`PREFIX-b`, the collector of `config(if_b)` started in
/// namespace B, a kernel-UDP translator in namespace A. `backend` names the backend in SKIP
/// lines; an error from the collector containing one of `skip_if` is a SKIP.
pub fn run(
    backend: &str,
    prefix: &str,
    skip_if: &[&str],
    config: impl FnOnce(&str) -> CollectorConfig,
) {
    let net = match Netns::up(prefix, false) {
        Ok(n) => n,
        Err(e) => return skip(backend, &e),
    };
    // Answers in broadcast frames would be dropped in namespace A.
    let sysctl = std::process::Command::new("ip")
        .args(["netns", "exec", &net.ns_a, "sysctl", "-qw"])
        .args(["net.ipv4.conf.all.drop_unicast_in_l2_multicast=1"])
        .arg(format!(
            "net.ipv4.conf.{prefix}-va.drop_unicast_in_l2_multicast=1"
        ))
        .status();
    assert!(
        sysctl.is_ok_and(|s| s.success()),
        "sysctl drop_unicast_in_l2_multicast in {}",
        net.ns_a
    );
    let cfg = config(&net.if_b);
    let col = match in_netns(&net.ns_b, move || Collector::start(cfg)) {
        Ok(c) => c,
        Err(e) if skip_if.iter().any(|s| e.contains(s)) => return skip(backend, &e),
        Err(e) => panic!("collector on {backend}: {e}"),
    };
    let c_addr = col.roce;
    assert_eq!(c_addr, SocketAddrV4::new(ADDR_B, 4791));

    let (t, reporter) = in_netns(&net.ns_a, move || {
        let mut cfg = TranslatorConfig::default();
        cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        cfg.translator.roce = SocketAddrV4::new(ADDR_A, 0);
        cfg.reliability.ack_every = 4;
        cfg.collectors = vec![CollectorSection::with_cm("c", c_addr, vec![1337, 1338])];
        cfg.routing.keywrite = "single:kw".into();
        let t = Translator::start(cfg)?;
        let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        Ok((t, s))
    })
    .unwrap_or_else(|e| panic!("the translator connects to the {backend} RNIC over RDMA_CM: {e}"));
    let t0 = Instant::now();
    while col.with_published(|p| p.cm.cm_established) < 2 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cm = col.with_published(|p| p.cm);
    assert_eq!(cm.cm_established, 2, "{cm:?}");
    assert_eq!(cm.cm_metadata_sent, 2, "{cm:?}");

    let mut reports: Vec<Report> = (0..300u32)
        .map(|i| Report {
            header: extended_header(0),
            primitive: Primitive::KeyWrite {
                redundancy: 2,
                key: Key::new(&i.to_be_bytes()).unwrap(),
                value: Value::new(&[i as u8; 12]).unwrap(),
            },
        })
        .collect();
    reports.extend((0..64u32).map(|i| Report {
        header: extended_header(0),
        primitive: Primitive::Append {
            list: i % 2,
            value: Value::new(&i.to_le_bytes()).unwrap(),
        },
    }));
    let mut buf = [0u8; 128];
    for (i, r) in reports.iter().enumerate() {
        let n = r.emit(Profile::Extended, &mut buf).unwrap();
        reporter.send_to(&buf[..n], t.report_addr).unwrap();
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert!(
        t.wait_for(Duration::from_secs(10), |c| c.rx_datagrams >= 364),
        "{:?}",
        t.counters()
    );
    let frames_needed = 300 * 2 + 64 / 8;
    assert!(
        col.wait_for(Duration::from_secs(10), |k| k.writes >= frames_needed),
        "{:?}",
        col.counters()
    );
    let k = col.counters();
    assert_eq!(
        k.out_of_seq_request + k.duplicate_request + k.bad_icrc + k.rkey_violation,
        0,
        "{k:?}"
    );
    // The translator received the RNIC's RoCEv2 answers (ACKs, addressed to its MAC).
    let ok = t.wait_for(Duration::from_secs(5), |c| c.roce_rx > 0);
    assert!(ok, "ACKs reached the translator: {:?}", t.counters());

    // Queries answer from the memory the writes landed in.
    let s = col.store("kw").unwrap();
    let view = KeyWriteView {
        region: &s.region,
        layout: KeyWriteLayout::new(KW_SLOTS, 16).unwrap(),
        hasher: KeyHasher::new(HashProfile::Independent, KW_SLOTS).unwrap(),
    };
    for i in 250..300u32 {
        match view.query(&Key::new(&i.to_be_bytes()).unwrap(), 2, Vote::Plurality) {
            KeyWriteAnswer::Value { value, .. } => assert_eq!(value.as_bytes(), &[i as u8; 12]),
            other => panic!("key {i}: {other:?}"),
        }
    }
    let s = col.store("ap").unwrap();
    let StoreKind::Append { list_stride, .. } = s.meta.kind else {
        panic!("ap is an Append store")
    };
    let layout = AppendLayout::new(AppendFormat::Sequenced, 256, 4, 8).unwrap();
    for list in 0..2u32 {
        let mut r = ListReader::new(&s.region, layout, list as u64 * list_stride, Start::Seq(1));
        let mut got = Vec::new();
        r.poll(&s.region, usize::MAX, |_, e| {
            got.push(u32::from_le_bytes(e.try_into().unwrap()))
        });
        let want: Vec<u32> = (0..64).filter(|i| i % 2 == list).collect();
        assert_eq!(got, want, "list {list}");
    }
    t.shutdown();
    col.shutdown();
}
