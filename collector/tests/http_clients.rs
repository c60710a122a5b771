//! Issue 28, part 6: the collector's HTTP clients (the control-API client under the CLI and
//! the cluster gateway; the ClickHouse exporter's) are bounded and keep secrets:
//! - a server that never answers, sends endless headers, an endless body or drips a byte at a
//!   time is cut off with an error, within the client's timeout;
//! - the ClickHouse exporter speaks https, verifying the server's certificate against
//!   `ca_file` (a certificate it does not trust is refused; there is no "accept anything");
//! - ClickHouse credentials never appear in an error or a log line, even when a server echoes
//!   the request back.

#[path = "../../io/http/tests/common/hostile.rs"]
mod hostile;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use dta_collector::client::Endpoint;
use dta_collector::export::clickhouse::ClickHouse;
use dta_collector::export::metrics::ExportMetrics;
use dta_collector::export::Exporter;
use dta_collector::CollectorConfig;
use hostile::{within, Hostile, HostileServer};

const USER: &str = "exporter";
const PASSWORD: &str = "correct horse battery staple";

/// Every log line of this test process, to look for secrets in.
fn logs() -> &'static Mutex<Vec<String>> {
    static LOGS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    static LOGGER: Capture = Capture;
    struct Capture;
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            logs()
                .lock()
                .unwrap()
                .push(format!("{} {}: {}", r.level(), r.target(), r.args()));
        }
        fn flush(&self) {}
    }
    let l = LOGS.get_or_init(|| Mutex::new(Vec::new()));
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
    l
}

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../io/http/tests/data")
        .join(f)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dta-http-clients-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A collector configuration exporting to `url` (extra `[export.clickhouse]` lines in
/// `extra`), with the password in a file.
fn export_config(dir: &Path, url: &str, extra: &str) -> Result<CollectorConfig, String> {
    let pw = dir.join("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    CollectorConfig::from_toml(&format!(
        "[collector]\nhugepages = false\ncontrol = \"127.0.0.1:1\"\n\
         [[store]]\nname = \"kw\"\nkind = \"keywrite\"\nslots = 1024\nslot_size = 8\n\
         [export.clickhouse]\nurl = \"{url}\"\nuser = \"{USER}\"\npassword_file = {pw:?}\n\
         state_file = {state:?}\ncreate_tables = false\ntimeout_secs = 2\n{extra}",
        state = dir.join("state.json"),
    ))
}

/// Starts an exporter on `cfg` and stops it after `secs` if it has not finished starting.
fn start_exporter(cfg: &CollectorConfig, secs: u64) -> Result<bool, String> {
    let mut ex = Exporter::new(
        cfg,
        Endpoint::plain("127.0.0.1:1"),
        Arc::new(ExportMetrics::default()),
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        s.store(true, Ordering::Relaxed);
    });
    ex.start(&stop)
}

fn basic_token() -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
}

/// A TLS server with the test certificate (localhost, 127.0.0.1, signed by tests/data/ca.pem)
/// answering like ClickHouse: 200 `0` to the right credentials, 516 otherwise.
fn fake_clickhouse_tls() -> dta_http::Server {
    let want = format!("Basic {}", basic_token());
    let handler: dta_http::Handler = Arc::new(move |r: dta_http::Request| {
        let auth = r
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if auth != want {
            return dta_http::Response::text(
                401,
                "Code: 516. DB::Exception: Authentication failed",
            );
        }
        dta_http::Response::text(200, "0")
    });
    let opts = dta_http::ServerOptions {
        tls: Some(dta_http::tls::server_config(&data("server.pem"), &data("server.key")).unwrap()),
        ..Default::default()
    };
    dta_http::Server::spawn("127.0.0.1:0".parse().unwrap(), opts, handler).unwrap()
}

#[test]
fn the_exporter_speaks_https_and_verifies_the_certificate() {
    let logs = logs();
    let dir = scratch("https");
    let ch = fake_clickhouse_tls();
    let url = format!("https://127.0.0.1:{}", ch.local_addr().port());
    // Trusting the CA that signed the server's certificate: connected, tables read.
    let cfg = export_config(&dir, &url, &format!("ca_file = {:?}\n", data("ca.pem")))
        .unwrap_or_else(|e| panic!("an https url with a ca_file is accepted: {e}"));
    assert_eq!(start_exporter(&cfg, 10), Ok(true));
    // Trusting another certificate: refused (and retried) until stopped, never connected.
    let cfg = export_config(&dir, &url, &format!("ca_file = {:?}\n", data("server.pem"))).unwrap();
    assert_eq!(
        start_exporter(&cfg, 2),
        Ok(false),
        "an untrusted server is refused"
    );
    let refused = logs
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("127.0.0.1") && l.to_ascii_lowercase().contains("certificate"));
    assert!(refused, "the refusal says why: {:?}", logs.lock().unwrap());
    // No ca_file: the system's trust store, which does not hold our test CA.
    let cfg = export_config(&dir, &url, "").unwrap();
    assert_eq!(start_exporter(&cfg, 2), Ok(false));
    // A missing or empty ca_file is refused when the exporter is made.
    let cfg = export_config(&dir, &url, "ca_file = \"/nonexistent/ca.pem\"\n").unwrap();
    let e = Exporter::new(
        &cfg,
        Endpoint::plain("127.0.0.1:1"),
        Arc::new(ExportMetrics::default()),
    )
    .err()
    .expect("a missing ca_file is an error");
    assert!(e.contains("ca_file"), "{e}");
    // ca_file without https makes no sense.
    let e = export_config(
        &dir,
        "http://127.0.0.1:8123",
        &format!("ca_file = {:?}\n", data("ca.pem")),
    )
    .unwrap_err();
    assert!(e.contains("ca_file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plain server that answers every request with `status`, ClickHouse error `code` and the
/// request itself in the body, as a misconfigured proxy's error page might.
fn echo_server(status: u16, code: u32) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            c.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut req = vec![0u8; 8192];
            let n = c.read(&mut req).unwrap_or(0);
            let body = format!(
                "Code: {code}. DB::Exception: you sent {}",
                String::from_utf8_lossy(&req[..n])
            );
            let _ = write!(
                c,
                "HTTP/1.0 {status} Oops\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    a
}

#[test]
fn clickhouse_credentials_never_reach_errors_or_logs() {
    let logs = logs();
    let dir = scratch("creds");
    let secrets = [PASSWORD.to_string(), basic_token()];
    // A permanent refusal echoing the request: the error the exporter stops with.
    let a = echo_server(403, 497);
    let cfg = export_config(&dir, &format!("http://{a}"), "").unwrap();
    let e = start_exporter(&cfg, 10).expect_err("a 403 is permanent");
    assert!(e.contains("you sent"), "the server's answer is kept: {e}");
    for s in &secrets {
        assert!(!e.contains(s.as_str()), "the error holds a credential: {e}");
    }
    // A transient failure (252: too many parts) echoing the request: logged at every retry.
    let a = echo_server(500, 252);
    let cfg = export_config(&dir, &format!("http://{a}"), "").unwrap();
    assert_eq!(start_exporter(&cfg, 1), Ok(false));
    // The client's own errors.
    let ch = ClickHouse::new(
        &a.to_string(),
        "dta",
        USER,
        PASSWORD,
        Duration::from_secs(2),
    );
    let e = ch.query("SELECT 1").unwrap_err();
    for s in &secrets {
        assert!(!e.to_string().contains(s.as_str()), "{e}");
        assert!(!format!("{e:?}").contains(s.as_str()), "{e:?}");
        assert!(!format!("{ch:?}").contains(s.as_str()));
    }
    let lines = logs.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("you sent")),
        "the retries were logged: {lines:?}"
    );
    for l in &lines {
        for s in &secrets {
            assert!(
                !l.contains(s.as_str()),
                "a log line holds a credential: {l}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_clickhouse_client_cuts_off_hostile_servers() {
    for kind in [
        Hostile::Silent,
        Hostile::EndlessHeaders,
        Hostile::EndlessBody,
        Hostile::HugeLength,
        Hostile::Drip,
    ] {
        let s = HostileServer::start(kind);
        let addr = s.addr.to_string();
        let (r, took) = within(Duration::from_secs(20), &format!("{kind:?}"), move || {
            ClickHouse::new(&addr, "dta", USER, PASSWORD, Duration::from_secs(2)).query("SELECT 1")
        });
        assert!(r.is_err(), "{kind:?}: {r:?}");
        assert!(took < Duration::from_secs(5), "{kind:?}: {took:?}");
    }
}

#[test]
fn the_control_api_client_cuts_off_hostile_servers() {
    for kind in [
        Hostile::EndlessHeaders,
        Hostile::EndlessBody,
        Hostile::HugeLength,
    ] {
        let s = HostileServer::start(kind);
        let addr = s.addr.to_string();
        let (r, _) = within(Duration::from_secs(20), &format!("{kind:?}"), move || {
            Endpoint::plain(&addr).request("GET", "/stats")
        });
        assert!(r.is_err(), "{kind:?}: {r:?}");
    }
    // Never answering, or a byte at a time: cut at the endpoint's timeout.
    for kind in [Hostile::Silent, Hostile::Drip] {
        let s = HostileServer::start(kind);
        let mut ep = Endpoint::plain(&s.addr.to_string());
        ep.limits.timeout = Duration::from_secs(2);
        let (r, took) = within(Duration::from_secs(20), &format!("{kind:?}"), move || {
            ep.request("GET", "/stats")
        });
        assert!(
            r.is_err() && took < Duration::from_secs(5),
            "{kind:?}: {r:?} after {took:?}"
        );
    }
}
