//! `scripts/netns.sh`, which the AF_XDP and DPDK tests and the backend benchmarks build their
//! veth pair with: it must not pick up unrelated environment variables (`PREFIX=/usr` is set
//! by `perf record`, and by many build environments; the script once read it as the address
//! prefix length and then SKIPped every run), and `THREADED=1` must leave namespace A's veth
//! receiving in a NAPI kernel thread. Root only; prints SKIP otherwise.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns.sh")
}

fn run(action: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new("bash")
        .arg(script())
        .arg(action)
        .envs(env.iter().copied())
        .output()
        .expect("run scripts/netns.sh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn in_ns(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn netns_script_ignores_prefix_and_threads_the_collector_side() {
    let id = std::process::id() % 10_000;
    let (ns_a, ns_b) = (format!("dns{id}-a"), format!("dns{id}-b"));
    let (if_a, if_b) = (format!("dns{id}-va"), format!("dns{id}-vb"));
    let names = [
        ("NS_A", ns_a.as_str()),
        ("NS_B", ns_b.as_str()),
        ("IF_A", if_a.as_str()),
        ("IF_B", if_b.as_str()),
    ];
    let mut env = names.to_vec();
    env.extend([("PREFIX", "/usr"), ("THREADED", "1")]);
    let up = run("up", &env);
    if let Some(l) = up.lines().find(|l| l.starts_with("SKIP")) {
        if l.contains("not root") || l.contains("no ip(8)") {
            let _ = writeln!(std::io::stderr(), "SKIP: netns_script: {l}");
            return;
        }
    }
    let addr = in_ns(&ns_a, &["ip", "-4", "-o", "addr", "show", "dev", &if_a]);
    let threaded = in_ns(&ns_a, &["cat", &format!("/sys/class/net/{if_a}/threaded")]);
    let threaded_b = in_ns(&ns_b, &["cat", &format!("/sys/class/net/{if_b}/threaded")]);
    run("down", &names);
    assert!(
        !up.contains("SKIP"),
        "netns.sh up with PREFIX=/usr in the environment: {up}"
    );
    assert!(addr.contains("10.77.0.1/24"), "address of {if_a}: {addr}");
    assert_eq!(threaded.trim(), "1", "threaded NAPI on {if_a}");
    assert_eq!(threaded_b.trim(), "0", "{if_b} is left as it was");
}
