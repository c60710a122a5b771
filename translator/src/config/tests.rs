use super::*;
use std::net::SocketAddrV4;

/// A collector section, which every valid file needs.
const C: &str = "\n[[collector]]\nname = \"c\"\ncm = \"127.0.0.1:4791\"\nports = [1337]\n";

fn parse(s: &str) -> Result<TranslatorConfig, String> {
    TranslatorConfig::from_toml(&format!("{s}{C}"))
}

#[test]
fn example_file_parses_and_defaults_match() {
    let c = TranslatorConfig::from_toml(include_str!("../../translator.example.toml"))
        .expect("example parses");
    let d = TranslatorConfig::default();
    assert_eq!(c.translator.max_redundancy, d.translator.max_redundancy);
    assert_eq!(c.reliability.ack_timeout_us, d.reliability.ack_timeout_us);
    assert_eq!(
        c.reliability.max_outstanding_psns,
        d.reliability.max_outstanding_psns
    );
    assert_eq!(c.postcard.cache_slots, d.postcard.cache_slots);
    assert_eq!(c.postcard.redundancy, None, "the stores' N applies");
    assert_eq!(c.collectors[0].endpoint.ports, vec![1337, 1338, 1339, 1340]);
    assert!(c.translator.roce.ip().is_loopback());
    assert_eq!(c.translator.report_steering, d.translator.report_steering);
    assert_eq!(c.translator.roce_steering, d.translator.roce_steering);
    assert_eq!(c.translator.backend, BackendKind::Udp);
    assert_eq!(c.af_xdp.frame_count, d.af_xdp.frame_count);
    assert_eq!(c.af_xdp.rx_batch, d.af_xdp.rx_batch);
    assert_eq!(c.pcap.loops, 1);
}

#[test]
fn backend_sections_parse_and_are_checked() {
    let r = parse(
            "[translator]\nbackend = \"af_xdp\"\n[af_xdp]\ninterface = \"veth0\"\nmode = \"skb\"\nqueue = 2",
        );
    if cfg!(feature = "af_xdp") {
        let c = r.expect("af_xdp parses");
        assert_eq!(c.translator.backend, BackendKind::AfXdp);
        assert_eq!(c.af_xdp.mode, XdpAttach::Skb);
        assert_eq!(c.af_xdp.queue, 2);
    } else {
        assert!(r.unwrap_err().contains("feature `af_xdp`"));
    }
    assert!(
        TranslatorConfig::from_toml("[translator]\nbackend = \"af_xdp\"")
            .unwrap_err()
            .contains("interface")
    );
    assert!(
        TranslatorConfig::from_toml("[translator]\nbackend = \"dpdk\"")
            .unwrap_err()
            .contains("eal_args")
    );
    assert!(TranslatorConfig::from_toml(
        "[translator]\nbackend = \"dpdk\"\nworkers = 2\n[dpdk]\neal_args = [\"-l\", \"0\"]"
    )
    .unwrap_err()
    .contains("ports"));
    assert!(
        TranslatorConfig::from_toml("[translator]\nbackend = \"pcap\"")
            .unwrap_err()
            .contains("input")
    );
    assert!(TranslatorConfig::from_toml(
        "[translator]\nbackend = \"pcap\"\nlisten = \"0.0.0.0:0\"\n[pcap]\ninput = [\"a.pcap\"]"
    )
    .unwrap_err()
    .contains("fixed ports"));
    assert!(
        TranslatorConfig::from_toml("[translator]\nbackend = \"rdma\"")
            .unwrap_err()
            .contains("unknown variant")
    );
    let p = parse(
            "[translator]\nbackend = \"pcap\"\ncapture = \"/tmp/x.pcap\"\n[pcap]\ninput = [\"a.pcap\"]\nloops = 3\nrate = 1000.0",
        )
        .expect("pcap parses");
    assert_eq!(p.pcap.loops, 3);
    assert_eq!(
        p.translator.capture.as_deref(),
        Some(std::path::Path::new("/tmp/x.pcap"))
    );
}

#[test]
fn sketch_keys_parse_and_are_checked() {
    let c = parse(
        "[sketch]\nexpected_switches = 5\nepoch_quorum = 4\nidle_epochs = 9\nlate_epochs = 3\n\
             [[sketch.switch]]\nid = 7\naddress = \"10.0.0.7\"\n\
             [[sketch.switch]]\nid = 8\naddress = \"10.0.0.8\"\n",
    )
    .expect("parses");
    assert_eq!(c.sketch.epoch_quorum, Some(4));
    assert_eq!((c.sketch.idle_epochs, c.sketch.late_epochs), (9, 3));
    assert_eq!(
        c.sketch.switch[1].address,
        std::net::Ipv4Addr::new(10, 0, 0, 8)
    );
    let d = TranslatorConfig::default().sketch;
    assert_eq!((d.epoch_quorum, d.idle_epochs, d.late_epochs), (None, 4, 2));
    for (bad, want) in [
            ("expected_switches = 3\nepoch_quorum = 4", "sketch.epoch_quorum"),
            ("epoch_quorum = 0", "sketch.epoch_quorum"),
            ("idle_epochs = 0", "sketch.idle_epochs"),
            ("late_epochs = 0", "sketch.late_epochs"),
            ("late_epochs = 1001", "sketch.late_epochs"),
            (
                "[[sketch.switch]]\nid = 1\naddress = \"10.0.0.1\"\n[[sketch.switch]]\nid = 1\naddress = \"10.0.0.2\"",
                "id 1 is listed twice",
            ),
            (
                "[[sketch.switch]]\nid = 1\naddress = \"255.255.255.255\"",
                "not a unicast address",
            ),
            ("[[sketch.switch]]\nid = 1\naddress = \"nope\"", "address"),
            ("[[sketch.switch]]\nid = 1\naddr = \"10.0.0.1\"", "addr"),
            ("quorum = 2", "quorum"),
        ] {
            let e = parse(&format!("[sketch]\n{bad}\n")).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
}

#[test]
fn steering_choices() {
    let c = parse(
        "[translator]\nreport_steering = \"dispatcher\"\nroce_steering = \"port-per-worker\"\n",
    )
    .expect("parses");
    assert_eq!(c.translator.report_steering, ReportSteering::Dispatcher);
    assert_eq!(c.translator.roce_steering, RoceSteering::PortPerWorker);
    assert!(TranslatorConfig::from_toml("[translator]\nreport_steering = \"x\"\n").is_err());
    let auto = ReportSteering::Auto;
    assert!(!auto.dispatches(1) && auto.dispatches(2) && auto.dispatches(3));
    assert!(!auto.dispatches(4));
    assert!(!ReportSteering::Dispatcher.dispatches(1));
    assert!(!ReportSteering::Reuseport.dispatches(2));
    let roce = |port| SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    assert!(RoceSteering::Auto.shared_port(roce(4791), 2));
    assert!(!RoceSteering::Auto.shared_port(roce(4791), 1));
    assert!(!RoceSteering::Auto.shared_port(roce(5000), 2));
    assert!(RoceSteering::Qpn.shared_port(roce(0), 2));
    assert!(!RoceSteering::PortPerWorker.shared_port(roce(4791), 4));
}

#[test]
fn int_keys_are_checked() {
    let c = parse("[int]\nport = 32766\n[int.postcard]\ninitial_ttl = \"auto\"")
        .expect("initial_ttl = \"auto\" parses");
    assert_eq!(c.int.postcard.initial_ttl, InitialTtl::Auto);
    assert_eq!(
        c.int.settings().unwrap().postcard.map(|p| p.1),
        Some(InitialTtl::Auto)
    );
    let c = parse("[int.postcard]\ninitial_ttl = 128").unwrap();
    assert_eq!(c.int.postcard.initial_ttl, InitialTtl::Fixed(128));
    for bad in [
        "[int.postcard]\ninitial_ttl = \"sometimes\"",
        "[int.postcard]\ninitial_ttl = 0",
        "[int.postcard]\ninitial_ttl = 256",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.contains("initial_ttl"), "{bad}: {e}");
    }
    // List IDs are 32 bits: the last list a rule names must exist.
    for (bad, key) in [
        ("[int.drop]\nfirst_list = 4294967290\nlists = 8", "int.drop"),
        (
            "[int.congestion]\nfirst_list = 4294967295\nlists = 2",
            "int.congestion",
        ),
    ] {
        let e = parse(bad).unwrap_err();
        assert!(e.contains(key), "{bad}: {e}");
    }
    parse("[int.drop]\nfirst_list = 4294967288\nlists = 8").expect("the last list fits");
}

#[test]
fn bad_files_get_clear_errors() {
    assert!(parse("[translator]\nworkers = 0")
        .unwrap_err()
        .contains("workers"));
    assert!(parse("[translator]\nbogus = 1")
        .unwrap_err()
        .contains("bogus"));
    // The web settings are the collector's keys, and configure the metrics server only.
    let e = parse("[translator]\nweb_config_file = \"/etc/dta/web.toml\"").unwrap_err();
    assert!(
        e.contains("web_config_file") && e.contains("translator.metrics"),
        "{e}"
    );
    let c = parse(
        "[translator]\nmetrics = \"127.0.0.1:0\"\ncontrol_hostnames = [\"m.example\"]\n\
             admin_token_file = \"/t\"",
    )
    .unwrap();
    assert_eq!(c.translator.web.control_hostnames, ["m.example"]);
    assert!(
        parse("[translator]\nmetrics = \"127.0.0.1:0\"\nweb_config = \"/w\"")
            .unwrap_err()
            .contains("web_config")
    );
    assert!(TranslatorConfig::from_toml("[[collector]]\nname = \"x\"")
        .unwrap_err()
        .contains("exactly one"));
    assert!(parse("[translator]\nroce = \"0.0.0.0:4791\"")
        .unwrap_err()
        .contains("ICRC"));
    // No collector at all: nothing could ever be written.
    let e = TranslatorConfig::from_toml("[translator]\nworkers = 1").unwrap_err();
    assert!(e.contains("no [[collector]]"), "{e}");
    assert!(TranslatorConfig::from_toml("").is_err());
    for (to, want) in [
        ("ports = [0]", "collector \"c\": ports: 0 is not"),
        (
            "ports = [1337, 1337]",
            "collector \"c\": ports: 1337 is listed twice",
        ),
        (
            "ports = [1337]\nmac = \"zz\"",
            "collector \"c\": mac: \"zz\" is not a MAC",
        ),
    ] {
        let e = TranslatorConfig::from_toml(&C.replace("ports = [1337]", to)).unwrap_err();
        assert!(e.contains(want), "{to}: {e}");
    }
    let twice = format!("{C}{C}");
    assert!(TranslatorConfig::from_toml(&twice)
        .unwrap_err()
        .contains("used twice"));
    assert!(parse("[postcard]\nredundancy = 0")
        .unwrap_err()
        .contains("postcard.redundancy"));
    // Each worker allocates its reporter table at start: a huge bound is refused, not tried.
    for bad in ["1048577", "18446744073709551615"] {
        let e = parse(&format!("[translator]\nmax_reporters = {bad}")).unwrap_err();
        assert!(
            e.contains("translator.max_reporters must be 0..=1048576"),
            "{e}"
        );
    }
    assert_eq!(
        parse("[translator]\nmax_reporters = 1048576")
            .unwrap()
            .translator
            .max_reporters,
        1 << 20
    );
    // The PSN cap: below 2^23 outstanding, room for a report, an AckReq'd frame in flight.
    for bad in ["0", "63", "4194305", "8388608"] {
        let e = parse(&format!("[reliability]\nmax_outstanding_psns = {bad}")).unwrap_err();
        assert!(
            e.contains("reliability.max_outstanding_psns must be 64..=4194304"),
            "{e}"
        );
    }
    let e = parse("[reliability]\nack_every = 1024\nmax_outstanding_psns = 2000").unwrap_err();
    assert!(e.contains("at least 2 × reliability.ack_every"), "{e}");
    for (ack_every, good) in [(32, 64), (64, 2048), (64, 4194304)] {
        let c = parse(&format!(
            "[reliability]\nack_every = {ack_every}\nmax_outstanding_psns = {good}"
        ))
        .unwrap();
        assert_eq!(c.reliability.max_outstanding_psns, good);
    }
    assert!(parse("[reliability]\nmax_outstanding_psns = -1")
        .unwrap_err()
        .contains("max_outstanding_psns"));
    assert_eq!(
        parse("[postcard]\nredundancy = 2")
            .unwrap()
            .postcard
            .redundancy,
        Some(2)
    );
}

#[test]
fn a_collector_section_takes_only_its_keys() {
    let base = "[[collector]]\nname = \"c\"\ncm = \"127.0.0.1:4791\"\nports = [1337]\n";
    let c = TranslatorConfig::from_toml(&format!("{base}connect_timeout_secs = 3\n")).unwrap();
    assert_eq!(c.collectors[0].connect_timeout_secs, 3);
    assert_eq!(c.collectors[0].endpoint.ports, [1337]);
    let e = TranslatorConfig::from_toml(&format!("{base}control = \"127.0.0.1:1\"\n")).unwrap_err();
    assert!(e.contains("unknown field `control`"), "{e}");
    assert!(TranslatorConfig::from_toml(&base.replace("127.0.0.1:4791", "x")).is_err());
}
