//! The shipped example configurations work as their comments say.
//!
//! 1. `collector/collector.example.toml` and `translator/translator.example.toml`, started
//!    together on this host from the files (only their UDP ports moved to free ones, so the
//!    test can run beside others), take every report of `dta gen`'s default mix: none is
//!    dropped for want of a store, a list or the right redundancy, and every one is translated
//!    once the translator flushes. (Before issue 16 the pair could not start off 10.0.0.101,
//!    and with the addresses fixed it dropped 58 % of the mix: `drop_no_store 1800`,
//!    `drop_unknown_list 1094`.)
//! 2. Both that pair and `examples/two-hosts/` pass the static check: the translator's `cm`
//!    is the collector's RoCEv2 address, its `ports` are exactly the collector's stores, and
//!    every report kind of the default mix (and every Append list it uses) has a store.
//! 3. `examples/cluster/`: the cluster file parses, both translators load as its members, and
//!    each collector's configuration is what the cluster file says of it (address, control
//!    API, rdma_cm ports, store names, and an Append store holding exactly its lists).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dta_bench::gen::{Generator, Scenario};
use dta_bench::sender::PacedSender;
use dta_collector::{Collector, CollectorConfig};
use dta_proto::meta::StoreKind;
use dta_proto::wire::report::MAX_EMIT_LEN;
use dta_translator::config::TranslatorConfig;
use dta_translator::Translator;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The pair's static agreement: addresses, ports, and a store for every kind and list of the
/// default mix.
fn check_pair(c: &CollectorConfig, t: &TranslatorConfig, what: &str) {
    assert_eq!(t.collectors.len(), 1, "{what}");
    let tc = &t.collectors[0];
    assert_eq!(
        tc.endpoint.cm,
        Some(c.collector.roce),
        "{what}: cm is the collector's roce"
    );
    let mut ports: Vec<u16> = (0..c.stores.len())
        .map(|i| c.stores[i].cm_port(i).unwrap())
        .collect();
    ports.sort_unstable();
    let mut want = tc.endpoint.ports.clone();
    want.sort_unstable();
    assert_eq!(
        want, ports,
        "{what}: the translator connects every store, and only those"
    );
    let sc = Scenario::default();
    let has = |k: &str| {
        c.stores.iter().any(|s| {
            matches!(
                (s.kind.layout(), k),
                (StoreKind::KeyWrite { .. }, "kw")
                    | (StoreKind::KeyIncrement { .. }, "ki")
                    | (StoreKind::Postcard { .. }, "pc")
            )
        })
    };
    assert!(has("kw") && has("ki") && has("pc"), "{what}");
    // The default mix's loss events use lists 0..lists, congestion lists..2*lists.
    for list in 0..2 * sc.lists {
        assert!(
            c.stores.iter().any(|s| matches!(
                *s.kind.layout(),
                StoreKind::Append { lists, first_list, .. }
                    if (first_list as u64..first_list as u64 + lists as u64)
                        .contains(&(list as u64))
            )),
            "{what}: no Append store holds list {list}"
        );
    }
    for s in &c.stores {
        if let Some(n) = s.redundancy() {
            if !matches!(s.kind.layout(), StoreKind::Postcard { .. }) {
                assert_eq!(n, sc.redundancy, "{what}: store {} and dta gen's N", s.name);
            }
        }
    }
}

#[test]
fn the_two_host_example_pair_agrees() {
    let c = CollectorConfig::load(&repo("examples/two-hosts/collector.toml")).unwrap();
    let t = TranslatorConfig::load(&repo("examples/two-hosts/translator.toml")).unwrap();
    check_pair(&c, &t, "examples/two-hosts");
    assert_ne!(
        t.translator.roce.ip(),
        c.collector.roce.ip(),
        "two hosts, two addresses"
    );
}

#[test]
fn the_one_host_example_pair_takes_the_whole_default_mix() {
    let mut ccfg = CollectorConfig::load(&repo("collector/collector.example.toml")).unwrap();
    let mut tcfg = TranslatorConfig::load(&repo("translator/translator.example.toml")).unwrap();
    check_pair(&ccfg, &tcfg, "the one-host examples");
    assert!(ccfg.collector.roce.ip().is_loopback());
    assert!(tcfg.translator.roce.ip().is_loopback());
    assert!(tcfg.translator.listen.ip().is_loopback());

    // Free ports instead of 4791, 14791 and 40040, which other tests or services may hold.
    let lo = Ipv4Addr::LOCALHOST;
    let roce = SocketAddrV4::new(lo, dta_bench::sender::free_udp_port(lo).unwrap());
    ccfg.collector.roce = roce;
    ccfg.collector.control = Some(SocketAddrV4::new(lo, 0));
    ccfg.collector.metadata_file = None;
    tcfg.translator.listen = SocketAddrV4::new(lo, 0);
    tcfg.translator.roce = SocketAddrV4::new(lo, 0);
    tcfg.collectors[0].endpoint.cm = Some(roce);
    let collector = Collector::start(ccfg).expect("the example collector starts");
    let translator = Translator::start(tcfg).expect("the example translator connects");

    const REPORTS: u64 = 30_000;
    let sc = Scenario::default();
    let mut g = Generator::new(&sc);
    let mut s = PacedSender::new(translator.report_addr, 0).unwrap();
    s.set_window(2048);
    let mut buf = [0u8; MAX_EMIT_LEN];
    let received = || translator.counters().rx_datagrams;
    for _ in 0..REPORTS {
        let n = g.next_report().emit(sc.wire_profile(), &mut buf).unwrap();
        s.push(&buf[..n], received).unwrap();
    }
    s.flush(received).unwrap();
    assert!(
        translator.wait_for(Duration::from_secs(30), |c| c.rx_datagrams >= REPORTS),
        "{:?}",
        translator.counters()
    );
    assert!(
        g.per_kind.iter().all(|&n| n > 0),
        "the default mix has every kind: {:?}",
        g.per_kind
    );
    // Shutting down writes what is held (partial Append batches, cached postcards).
    let snaps = translator.shutdown();
    let mut c = dta_translator::datapath::stats::TranslatorCounters::default();
    for w in &snaps {
        c.merge(&w.counters);
    }
    assert_eq!(c.reports(), REPORTS, "every datagram parses: {c:?}");
    for (name, v) in [
        ("drop_no_store", c.drop_no_store),
        ("drop_unknown_list", c.drop_unknown_list),
        ("drop_redundancy_mismatch", c.drop_redundancy_mismatch),
        ("drop_bad_redundancy", c.drop_bad_redundancy),
        ("drop_value_too_long", c.drop_value_too_long),
        ("drop_bad_hop", c.drop_bad_hop),
    ] {
        assert_eq!(v, 0, "{name}: {c:?}");
    }
    // Everything else is translated: a repeated hop of a cached path is the only drop a
    // correct configuration can see (the newer postcard wins), and a loaded machine may
    // shed nothing else here (no rate limit is configured).
    assert_eq!(
        c.translated + c.drop_postcard_duplicate_hop,
        REPORTS,
        "{c:?}"
    );
    assert_eq!(c.dropped(), c.drop_postcard_duplicate_hop, "{c:?}");
    let k = collector.counters();
    assert!(k.writes > 0 && k.atomics > 0, "{k:?}");
    collector.shutdown();
}

#[test]
fn the_cluster_example_agrees_with_its_collectors_and_translators() {
    let cluster = dta_collector::cluster::load_cluster(&repo("examples/cluster/cluster.toml"))
        .expect("cluster.toml parses");
    assert_eq!(cluster.collectors.len(), 3);
    for t in ["translator-1", "translator-2"] {
        let cfg = TranslatorConfig::load(&repo(&format!("examples/cluster/{t}.toml")))
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        let names: Vec<&str> = cfg
            .collectors
            .iter()
            .map(|c| c.endpoint.name.as_str())
            .collect();
        assert_eq!(names, ["c1", "c2", "c3"], "{t}: the cluster's collectors");
        assert!(cfg.cluster_map.is_some(), "{t}");
    }
    let p = cluster.newest();
    for (i, cc) in cluster.collectors.iter().enumerate() {
        let c = CollectorConfig::load(&repo(&format!(
            "examples/cluster/{}.toml",
            cc.endpoint.name
        )))
        .unwrap_or_else(|e| panic!("{}: {e}", cc.endpoint.name));
        let what = &cc.endpoint.name;
        assert_eq!(cc.endpoint.cm, Some(c.collector.roce), "{what}: cm");
        assert_eq!(
            cc.control.as_deref(),
            c.collector.control.map(|a| a.to_string()).as_deref(),
            "{what}: control"
        );
        let mut ports: Vec<u16> = (0..c.stores.len())
            .map(|j| c.stores[j].cm_port(j).unwrap())
            .collect();
        ports.sort_unstable();
        assert_eq!(ports, cc.endpoint.ports, "{what}: ports");
        for name in [
            &cluster.stores.keywrite,
            &cluster.stores.keyincrement,
            &cluster.stores.append,
        ]
        .into_iter()
        .flatten()
        {
            assert!(
                c.stores.iter().any(|s| &s.name == name),
                "{what}: store {name}"
            );
        }
        let owned: Vec<(u64, u64)> = p
            .lists
            .iter()
            .filter(|r| r.collector == i)
            .map(|r| (u64::from(r.first), r.end))
            .collect();
        let held: Vec<(u64, u64)> = c
            .stores
            .iter()
            .filter_map(|s| match *s.kind.layout() {
                StoreKind::Append {
                    first_list, lists, ..
                } => Some((
                    u64::from(first_list),
                    u64::from(first_list) + u64::from(lists),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            owned, held,
            "{what}: its Append store holds exactly its lists"
        );
        assert!(p.keys.contains(&i), "{what} owns key slots");
    }
}

/// `examples/zero/`: the collector's `[pull]` names the agent of `agent.toml` (its address
/// and rdma_cm port), on addresses that do not collide with the collector's own.
#[test]
fn the_zero_example_pair_agrees() {
    let c = CollectorConfig::load(&repo("examples/zero/collector.toml")).unwrap();
    let p = c.pull.as_ref().expect("a [pull] section");
    // The agent's file (its own parser checks it in agent/tests/daemon.rs).
    let agent = std::fs::read_to_string(repo("examples/zero/agent.toml")).unwrap();
    let key = |k: &str| {
        agent
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} = ")))
            .unwrap_or_else(|| panic!("agent.toml sets {k}"))
            .trim_matches('"')
            .to_string()
    };
    let listen: std::net::SocketAddrV4 = key("listen").parse().unwrap();
    assert_eq!(p.agents[0].roce, listen);
    assert_eq!(p.agents[0].cm_port.to_string(), key("cm_port"));
    assert_ne!(p.listen, c.collector.roce, "the puller has its own socket");
    assert_ne!(listen, c.collector.roce);
}
