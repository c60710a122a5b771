//! A collector cluster end to end over loopback: three collectors, translators that are
//! cluster members, and the cluster query client and gateway.
//!
//! `scripts/cluster-demo` runs the same with separate processes; this is its in-process
//! equivalent at a smaller size (the same driver: `dta_bench::cluster`), and the resharding
//! case: keys written in epoch 1 over two collectors, a third collector added for epoch 2
//! (the running translator switches when the cluster file changes), keys written again, and
//! queries for both epochs.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use dta_bench::cluster as demo;
use dta_collector::cluster::{load_cluster, ClusterClient, Gateway, KeyQuery};
use dta_collector::config::{CollectorConfig, DeviceSection, StoreConfig, StoreKindConfig};
use dta_collector::Collector;
use dta_proto::hash::HashProfile;
use dta_proto::layout::AppendFormat;
use dta_proto::meta::StoreKind;
use dta_tests::harness::free_port;
use dta_translator::{Translator, TranslatorConfig};

/// Key-Write "paths", Key-Increment "counts" and Append "events" holding lists
/// `first..first + lists`, on rdma_cm ports 1337..1339.
fn stores(first: u32, lists: u32) -> Vec<StoreConfig> {
    let s = |name: &str, port, kind| StoreConfig {
        name: name.into(),
        port: Some(port),
        cm_allow: None,
        kind,
    };
    vec![
        s(
            "paths",
            1337,
            StoreKindConfig::new(StoreKind::KeyWrite {
                slots: 1 << 16,
                slot_size: 32,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        s(
            "counts",
            1338,
            StoreKindConfig::new(StoreKind::KeyIncrement {
                slots: 1 << 16,
                hash: HashProfile::Independent,
            })
            .with_redundancy(2),
        ),
        s(
            "events",
            1339,
            StoreKindConfig::new(StoreKind::Append {
                lists,
                first_list: first,
                capacity: 4096,
                entry_size: 20,
                batch: 4,
                format: AppendFormat::Sequenced,
                list_stride: 0,
            }),
        ),
    ]
}

struct Node {
    _collector: Collector,
    roce: SocketAddrV4,
    control: SocketAddrV4,
}

fn collector(i: u8, first: u32, lists: u32) -> Node {
    let ip = Ipv4Addr::new(127, 0, 0, 10 + i);
    let roce = SocketAddrV4::new(ip, free_port(ip));
    let collector = Collector::start(CollectorConfig {
        collector: DeviceSection {
            roce,
            control: Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            hugepages: false,
            ..DeviceSection::default()
        },
        static_peers: vec![],
        stores: stores(first, lists),
        export: Default::default(),
        pull: None,
    })
    .expect("collector starts");
    let control = collector.control_addr().expect("control API");
    Node {
        _collector: collector,
        roce,
        control,
    }
}

fn collector_toml(name: &str, n: &Node) -> String {
    format!(
        "[[collector]]\nname = \"{name}\"\ncontrol = \"{}\"\ncm = \"{}\"\nports = [1337, 1338, 1339]\n\n",
        n.control, n.roce
    )
}

const HEAD: &str =
    "[stores]\nkeywrite = \"paths\"\nkeyincrement = \"counts\"\nappend = \"events\"\n\n";

fn translator(cluster: &Path, i: u8) -> Translator {
    let ip = Ipv4Addr::new(127, 0, 0, 20 + i);
    let mut cfg = TranslatorConfig::default();
    cfg.translator.listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    cfg.translator.roce = SocketAddrV4::new(ip, free_port(ip));
    cfg.append.flush_delay_us = 500;
    let c = dta_translator::config::load_cluster(cluster).expect("cluster file");
    let cfg = cfg
        .with_cluster(cluster.to_path_buf(), c)
        .expect("member config");
    Translator::start(cfg).expect("translator joins the cluster")
}

/// A directory for the test's cluster file, removed when the test ends (declared before the
/// translators that re-read the file, so it outlives them).
fn dir(tag: &str) -> dta_tests::scratch::ScratchDir {
    dta_tests::scratch::ScratchDir::new(&format!("dta-cluster-{tag}"))
}

fn settle(ts: &[&Translator], sent: u64) {
    let t0 = Instant::now();
    while ts.iter().map(|t| t.counters().rx_datagrams).sum::<u64>() < sent {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "translators took everything"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn three_collectors_two_translators_answer_as_one_system() {
    // Lists 0..16 (loss events 0..8, congestion 8..16): 0..6 on c1, 6..11 on c2, 11..16 on c3.
    let nodes = [collector(1, 0, 6), collector(2, 6, 5), collector(3, 11, 5)];
    let mut file = format!("[cluster]\nname = \"demo\"\nepoch = 1\n\n{HEAD}");
    for (i, n) in nodes.iter().enumerate() {
        file += &collector_toml(&format!("c{}", i + 1), n);
    }
    file += "[[epoch]]\nnumber = 1\nkeys = [\"c1\", \"c2\", \"c3\"]\nlists = [\n  \
             { collector = \"c1\", first = 0, count = 6 },\n  \
             { collector = \"c2\", first = 6, count = 5 },\n  \
             { collector = \"c3\", first = 11, count = 5 },\n]\n";
    let d = dir("demo");
    let path = d.path().join("cluster.toml");
    std::fs::write(&path, &file).unwrap();
    let t1 = translator(&path, 1);
    let t2 = translator(&path, 2);
    let sc = demo::scenario(7, 8);
    let truth = demo::drive(&sc, &[t1.report_addr, t2.report_addr], 6000, 0).unwrap();
    settle(&[&t1, &t2], truth.per_translator.iter().sum());
    let client = ClusterClient::new(load_cluster(&path).unwrap());
    let v = demo::verify_settled(&client, &truth, None, Duration::from_secs(10)).unwrap();
    demo::print(&v, &truth);
    assert!(
        v.mismatches.is_empty(),
        "{:?}",
        &v.mismatches[..v.mismatches.len().min(5)]
    );
    assert_eq!(v.keywrite_ok as usize, truth.keywrite.len());
    assert_eq!(v.entries.0, v.entries.1);
    assert!(
        truth.per_translator.iter().all(|&n| n > 0),
        "both translators used"
    );
    // Every collector holds a share of the keys and of the entries.
    for (name, kw, ck, _, ap) in &v.per_collector {
        assert!(
            *kw > 0 && *ck > 0 && *ap > 0,
            "{name} holds nothing of something"
        );
    }
    // Nothing was dropped for want of a store or list.
    for t in [&t1, &t2] {
        let c = t.counters();
        assert_eq!(c.drop_no_store + c.drop_unknown_list, 0, "{c:?}");
    }
    // The gateway answers the same from the cluster, and counts per collector.
    let gw = std::sync::Arc::new(Gateway::new(client));
    let srv = dta_collector::cluster::serve("127.0.0.1:0".parse().unwrap(), gw.clone()).unwrap();
    let addr = srv.local_addr().to_string();
    let (k, want) = truth.keywrite.iter().next().unwrap();
    let key = dta_collector::query::keys::to_hex(k);
    let r = dta_collector::client::request(&addr, "GET", &format!("/query/keywrite/paths/{key}"))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let a: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let got = dta_collector::query::keys::parse_hex(a["value"].as_str().unwrap()).unwrap();
    assert_eq!(&got[..want.len()], &want[..]);
    let owner = gw.client().cluster().newest().key_owner(k).unwrap();
    assert_eq!(a["collector"], format!("c{}", owner + 1));
    let body: String = truth
        .counters
        .keys()
        .map(|k| dta_collector::query::keys::to_hex(k) + "\n")
        .collect();
    let r = dta_collector::client::request_with_body(
        &addr,
        "POST",
        "/query/counter/counts",
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.lines().count(), truth.counters.len());
    let r = dta_collector::client::request(&addr, "GET", "/query/keywrite/nope/00").unwrap();
    assert_eq!(r.status, 404);
    let m = dta_collector::client::request(&addr, "GET", "/metrics").unwrap();
    for want in [
        "dta_gateway_collector_requests_total{collector=\"c1\"}",
        "dta_gateway_collector_errors_total{collector=\"c3\"} 0",
        "dta_gateway_fanout_seconds_count",
        "dta_gateway_requests_total{endpoint=\"query\",code=\"404\"} 1",
    ] {
        assert!(m.body.contains(want), "{want} missing from\n{}", m.body);
    }
    drop(t1);
    drop(t2);
    drop(nodes);
}

/// Key-Write and Key-Increment reports for keys `keys`, value byte `tag`.
fn keyed(keys: std::ops::Range<u32>, tag: u8) -> Vec<dta_proto::wire::report::Report> {
    use dta_proto::wire::report::Primitive;
    let mut v = Vec::new();
    for k in keys {
        let key = dta_proto::Key::new(&k.to_be_bytes()).unwrap();
        for primitive in [
            Primitive::KeyWrite {
                redundancy: 2,
                key,
                value: dta_proto::Value::new(&[tag; 8]).unwrap(),
            },
            Primitive::KeyIncrement {
                redundancy: 2,
                key,
                delta: u64::from(tag),
            },
        ] {
            v.push(dta_proto::wire::report::Report {
                header: dta_tests::harness::extended_header(0),
                primitive,
            });
        }
    }
    v
}

fn appends(list: u32, n: u32, tag: u8) -> Vec<dta_proto::wire::report::Report> {
    (0..n)
        .map(|i| dta_proto::wire::report::Report {
            header: dta_tests::harness::extended_header(0),
            primitive: dta_proto::wire::report::Primitive::Append {
                list,
                value: dta_proto::Value::new(&[tag, i as u8, 0, 1]).unwrap(),
            },
        })
        .collect()
}

fn send(t: &Translator, reports: &[dta_proto::wire::report::Report]) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let before = t.counters().rx_datagrams;
    let mut buf = [0u8; 128];
    for (i, r) in reports.iter().enumerate() {
        let n = r
            .emit(dta_proto::wire::report::Profile::Extended, &mut buf)
            .unwrap();
        sock.send_to(&buf[..n], t.report_addr).unwrap();
        if i % 500 == 499 {
            settle(&[t], before + i as u64 + 1);
        }
    }
    settle(&[t], before + reports.len() as u64);
}

fn value_of(a: &serde_json::Value) -> Option<u8> {
    let v = dta_collector::query::keys::parse_hex(a.get("value")?.as_str()?).ok()?;
    Some(v[0])
}

#[test]
fn resharding_keeps_the_old_epochs_data_readable() {
    // c3 is connected from the start but owns nothing until epoch 2. Its Append store holds
    // lists 4..8, which move to it from c2.
    let nodes = [collector(4, 0, 4), collector(5, 4, 4), collector(6, 4, 4)];
    let mut coll = String::new();
    for (i, n) in nodes.iter().enumerate() {
        coll += &collector_toml(&format!("c{}", i + 1), n);
    }
    let e1 = "[[epoch]]\nnumber = 1\nkeys = [\"c1\", \"c2\", \"c1\", \"c2\", \"c1\", \"c2\"]\n\
              lists = [{ collector = \"c1\", first = 0, count = 4 }, \
              { collector = \"c2\", first = 4, count = 4 }]\n\n";
    let e2 = "[[epoch]]\nnumber = 2\nkeys = [\"c1\", \"c2\", \"c3\", \"c2\", \"c1\", \"c3\"]\n\
              lists = [{ collector = \"c1\", first = 0, count = 4 }, \
              { collector = \"c3\", first = 4, count = 4 }]\n";
    let d = dir("reshard");
    let path = d.path().join("cluster.toml");
    std::fs::write(&path, format!("[cluster]\nepoch = 1\n{HEAD}{coll}{e1}")).unwrap();
    let t = translator(&path, 3);
    assert_eq!(t.cluster_epoch(), Some(1));
    // Epoch 1: keys 0..400 with value 1, list 5 (c2) gets 10 entries.
    send(&t, &keyed(0..400, 1));
    send(&t, &appends(5, 10, 1));
    // A third collector joins for epoch 2: the running translator re-reads the file.
    std::fs::write(&path, format!("[cluster]\nepoch = 2\n{HEAD}{coll}{e1}{e2}")).unwrap();
    let t0 = Instant::now();
    while t.cluster_epoch() != Some(2) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "translator switched epochs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Workers take the routes up within a loop iteration (at most 10 ms idle).
    std::thread::sleep(Duration::from_millis(100));
    // Epoch 2: keys 0..200 written again with value 2; list 5 (now c3) gets 6 entries.
    send(&t, &keyed(0..200, 2));
    send(&t, &appends(5, 6, 2));
    std::thread::sleep(Duration::from_millis(300));
    let cluster = load_cluster(&path).unwrap();
    assert_eq!(cluster.epoch, 2);
    let (p1, p2) = (
        cluster.epoch(1).unwrap().clone(),
        cluster.epoch(2).unwrap().clone(),
    );
    let client = ClusterClient::new(cluster);
    let keys: Vec<String> = (0..400u32)
        .map(|k| dta_collector::query::keys::to_hex(&k.to_be_bytes()))
        .collect();
    let by_default = client.query(KeyQuery::KeyWrite, &keys, None, "").unwrap();
    let in_e1 = client
        .query(KeyQuery::KeyWrite, &keys, Some(1), "")
        .unwrap();
    let in_e2 = client
        .query(KeyQuery::KeyWrite, &keys, Some(2), "")
        .unwrap();
    let counts = client.query(KeyQuery::Counter, &keys, None, "").unwrap();
    let counts_e2 = client.query(KeyQuery::Counter, &keys, Some(2), "").unwrap();
    let name = |i: usize| format!("c{}", i + 1);
    let mut moved = 0;
    for k in 0..400u32 {
        let kb = k.to_be_bytes();
        let (o1, o2) = (p1.key_owner(&kb).unwrap(), p2.key_owner(&kb).unwrap());
        let i = k as usize;
        let rewritten = k < 200;
        let newest = if rewritten { 2 } else { 1 };
        // By default: the newest value, from whoever holds it (old keys from their old owner).
        assert_eq!(
            value_of(&by_default[i]),
            Some(newest),
            "key {k}: {}",
            by_default[i]
        );
        let from = if rewritten { o2 } else { o1 };
        assert_eq!(by_default[i]["collector"], name(from), "key {k}");
        // Epoch 1 asks epoch 1's owner: a key that moved still has its epoch-1 value there.
        assert_eq!(in_e1[i]["collector"], name(o1));
        let e1_value = if o1 != o2 || !rewritten { 1 } else { 2 };
        assert_eq!(value_of(&in_e1[i]), Some(e1_value), "key {k}: {}", in_e1[i]);
        // Epoch 2 asks epoch 2's owner: keys not written since are empty on a new owner.
        assert_eq!(in_e2[i]["collector"], name(o2));
        let e2_value = if rewritten {
            Some(2)
        } else if o1 == o2 {
            Some(1)
        } else {
            None
        };
        assert_eq!(value_of(&in_e2[i]), e2_value, "key {k}: {}", in_e2[i]);
        // Counters add up over the owners: 1 in epoch 1, 2 more in epoch 2 for keys < 200.
        let total = if rewritten { 3 } else { 1 };
        assert_eq!(counts[i]["estimate"], total, "key {k}: {}", counts[i]);
        let on_new = match (rewritten, o1 == o2) {
            (_, true) => total,
            (true, false) => 2,
            (false, false) => 0,
        };
        assert_eq!(
            counts_e2[i]["estimate"], on_new,
            "key {k}: {}",
            counts_e2[i]
        );
        if o1 != o2 {
            moved += 1;
        }
    }
    assert!(
        (80..200).contains(&moved),
        "about a third of the keys moved: {moved}"
    );
    // List 5 moved from c2 to c3: its entries come from both, oldest epoch first.
    let (all, lost) = client.tail(5, None, "").unwrap();
    assert_eq!(lost, 0);
    let tags: Vec<(String, u8)> = all
        .iter()
        .map(|e| {
            let b = dta_collector::query::keys::parse_hex(e["entry"].as_str().unwrap()).unwrap();
            (e["collector"].as_str().unwrap().to_string(), b[0])
        })
        .collect();
    let want: Vec<(String, u8)> = (0..10)
        .map(|_| ("c2".to_string(), 1))
        .chain((0..6).map(|_| ("c3".to_string(), 2)))
        .collect();
    assert_eq!(tags, want);
    let (only2, _) = client.tail(5, Some(2), "").unwrap();
    assert_eq!(only2.len(), 6);
    assert_eq!(
        t.counters().drop_no_store + t.counters().drop_unknown_list,
        0
    );
    drop(t);
    drop(nodes);
}
