//! The `dta-agent` daemon: its help, its refusal of wrong settings, and a run that serves the
//! host's real counters over RoCEv2 and Prometheus metrics.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{CmAnswer, Requester};
use dta_proto::zero::{block_len, decode_control, verify_block, ControlHeader, HEADER_LEN};

const BIN: &str = env!("CARGO_BIN_EXE_dta-agent");

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn help_explains_the_agent() {
    let (rc, out, _) = run(&["--help"]);
    assert_eq!(rc, 0);
    for want in [
        "ZERO-mode agent",
        "RDMA READ",
        "net/<ifname>",
        "--listen",
        "--cm-port",
        "--interval-ms",
        "--net-dev",
        "--proc-stat",
        "--allow",
        "--metrics-listen",
        "--config",
    ] {
        assert!(out.contains(want), "--help lacks {want:?}:\n{out}");
    }
}

#[test]
fn wrong_settings_are_refused_with_a_clear_message() {
    let dir = std::env::temp_dir().join(format!("dta-agent-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let unknown = file("unknown.toml", "listen = \"127.0.0.1\"\nintervall_ms = 5\n");
    let bad_cidr = file(
        "cidr.toml",
        "listen = \"127.0.0.1\"\nallow = [\"10.0.0.1/8\"]\n",
    );
    let bad_type = file("type.toml", "listen = \"127.0.0.1\"\nnet_dev = \"maybe\"\n");
    let web_alone = file(
        "web-alone.toml",
        "listen = \"127.0.0.1\"\ncontrol_hostnames = [\"agent.example\"]\n",
    );
    let web_missing = file(
        "web-missing.toml",
        "listen = \"127.0.0.1\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         web_config_file = \"/nonexistent/web.toml\"\n",
    );
    let good = file(
        "good.toml",
        "listen = \"127.0.0.1:4791\"\ninterval_ms = 250\nallow = [\"10.0.0.0/8\"]\n",
    );
    for (args, want) in [
        (vec!["-c", &unknown], "unknown field `intervall_ms`"),
        (vec!["-c", &bad_cidr], "host bits set"),
        (vec!["-c", &bad_type], "net_dev"),
        (vec!["-c", &web_alone], "set metrics_listen"),
        (vec!["-c", &web_missing], "web_config_file"),
        (
            vec!["-c", "/nonexistent/agent.toml"],
            "/nonexistent/agent.toml",
        ),
        (vec![], "no RoCEv2 address"),
        (vec!["--listen", "0.0.0.0"], "not 0.0.0.0"),
        (vec!["--listen", "host:1"], "not an IPv4 address"),
        (
            vec!["--listen", "127.0.0.1", "--interval-ms", "0"],
            "interval_ms 0",
        ),
        (
            vec!["--listen", "127.0.0.1", "--proc-stat", "maybe"],
            "on or off",
        ),
        (
            vec!["--listen", "127.0.0.1", "--allow", "10.0.0.0/33"],
            "10.0.0.0/33",
        ),
    ] {
        let (rc, _, err) = run(&args);
        assert_eq!(rc, 2, "{args:?} must fail: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    }
    // A good file, with a flag overriding it.
    let (rc, out, err) = run(&["-c", &good, "--check", "--interval-ms", "40"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("interval_ms: 40") && out.contains("10.0.0.0"),
        "{out}"
    );
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/dta-agent.toml");
    let (rc, _, err) = run(&["-c", example, "--check"]);
    assert_eq!(rc, 0, "the example configuration is valid: {err}");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/zero/agent.toml");
    let (rc, _, err) = run(&["-c", example, "--check"]);
    assert_eq!(rc, 0, "examples/zero/agent.toml is valid: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `host:port` after `marker` in a log line.
fn addr_after(line: &str, marker: &str) -> Option<SocketAddrV4> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[test]
fn the_daemon_serves_the_hosts_counters_and_metrics() {
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--cm-port",
            "7711",
            "--interval-ms",
            "50",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let daemon = Daemon(child);
    let (mut roce, mut http) = (None, None);
    let mut lines = BufReader::new(stderr).lines();
    while roce.is_none() || http.is_none() {
        let line = lines
            .next()
            .expect("the daemon logs its addresses")
            .unwrap();
        roce = roce.or(addr_after(&line, "blocks) on "));
        http = http.or(addr_after(&line, "serving http://"));
    }
    // Keep draining the log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let (roce, http) = (roce.unwrap(), http.unwrap());

    let mut req = Requester::bind(Ipv4Addr::LOCALHOST);
    let CmAnswer::Connected(mut c) = req.connect(roce, 7711) else {
        panic!("refused")
    };
    let h = ControlHeader::decode(&req.read(&mut c, 0, HEADER_LEN as u32).unwrap()).unwrap();
    let control = req.read(&mut c, 0, h.control_len() as u32).unwrap();
    let (_, descs) = decode_control(&control).unwrap();
    let names: Vec<&str> = descs.iter().map(|d| d.name.as_str()).collect();
    assert!(names.starts_with(&["cpu", "stat"]), "{names:?}");
    assert!(names.contains(&"net/lo"), "{names:?}");
    let cpu = &descs[0];
    let read_cpu = |req: &mut Requester, c: &mut common::Conn| loop {
        let b = req
            .read(c, cpu.offset, block_len(cpu.entries) as u32)
            .unwrap();
        // A READ racing the sampler is refused, never wrong: read again.
        if let Ok(s) = verify_block(&b, cpu.entries) {
            return (s.seq, s.iter().collect::<Vec<u64>>());
        }
    };
    let (seq1, v1) = read_cpu(&mut req, &mut c);
    assert!(v1[3] > 0, "idle ticks: {v1:?}");
    std::thread::sleep(Duration::from_millis(200));
    let (seq2, v2) = read_cpu(&mut req, &mut c);
    assert!(seq2 > seq1, "the sampler republishes every 50 ms");
    assert!(
        v1.iter().zip(&v2).all(|(a, b)| b >= a),
        "counters: {v1:?} {v2:?}"
    );

    std::thread::sleep(Duration::from_millis(300));
    let mut s = TcpStream::connect(http).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let body = &page[page.find("\r\n\r\n").unwrap() + 4..];
    let reads: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("dta_agent_rnic_reads_total "))
        .expect("a READ counter")
        .parse()
        .unwrap();
    assert!(reads >= 4, "{body}");
    assert!(
        body.contains("dta_agent_cm_established_total 1\n"),
        "{body}"
    );
    assert!(body.contains("process_cpu_seconds_total"));
    match dta_io::process::promtool_check_metrics(body) {
        None => eprintln!("SKIP: promtool not found"),
        Some(r) => assert_eq!(r, Ok(()), "{body}"),
    }
    drop(daemon);
}
