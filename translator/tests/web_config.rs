//! Issue 28, part 6: the translator's HTTP server (`[translator] metrics`) takes the same web
//! configuration as the collector's control API: `web_config_file` (TLS, basic-auth users),
//! `admin_token_file` and `control_hostnames`, keys of `[translator]`.

#[path = "../../io/http/tests/common/web_fixture.rs"]
mod web_fixture;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};

use dta_proto::meta::{CollectorMeta, QpMeta, StoreKind, StoreMeta};
use web_fixture::*;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_metrics_server_takes_the_collectors_web_configuration() {
    let data = data_dir(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("dta-translator-web-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let web = write_web_config(&dir, &data);
    // Static set-up (nothing needs to answer): one Key-Write store, one prepared QP.
    let meta = CollectorMeta {
        roce: "127.0.0.1:9".parse().unwrap(),
        mac: "02:00:00:00:00:51".into(),
        verify_icrc: true,
        stores: vec![StoreMeta {
            name: "paths".into(),
            addr: 0x1000,
            len: 1 << 20,
            rkey: 7,
            qps: vec![QpMeta {
                qpn: 0x11,
                psn: 0x22,
                peer_qpn: 0x33,
            }],
            redundancy: None,
            kind: StoreKind::KeyWrite {
                slots: 1 << 16,
                slot_size: 8,
                hash: dta_proto::hash::HashProfile::Independent,
            },
        }],
    };
    let meta_file = dir.join("collector.json");
    std::fs::write(&meta_file, serde_json::to_string(&meta).unwrap()).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let cfg = dir.join("translator.toml");
    std::fs::write(
        &cfg,
        format!(
            "[translator]\nlisten = \"127.0.0.1:0\"\nroce = \"127.0.0.1:0\"\n\
             metrics = \"{addr}\"\nweb_config_file = {web:?}\n\
             control_hostnames = [\"metrics.example\"]\n\
             [[collector]]\nname = \"c\"\nmetadata = {meta_file:?}\n"
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_dta-translator"))
        .arg("-c")
        .arg(&cfg)
        .arg("--progress")
        .arg("0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Kill(child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    if let Ok(Some(st)) = child.0.try_wait() {
        let mut e = String::new();
        use std::io::Read as _;
        child
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut e)
            .unwrap();
        panic!("the translator exited ({st}): {e}");
    }
    // TLS and basic auth: no credentials, 401; prom's, the page.
    let (st, _) = wait_answer(addr, &data, "/metrics", "127.0.0.1", false);
    assert_eq!(st, 401);
    let (st, body) = get_tls(addr, &data, "/metrics", "127.0.0.1", true).unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("# TYPE dta_translator_"), "{body}");
    assert!(
        body.contains("dta_translator_http_unauthorized_total 1"),
        "the server's own refusals are counted: {body}"
    );
    // Host names: the configured one and IP literals, nothing else.
    let (st, _) = get_tls(addr, &data, "/metrics", "metrics.example", true).unwrap();
    assert_eq!(st, 200);
    let (st, _) = get_tls(addr, &data, "/metrics", "rebound.attacker.example", true).unwrap();
    assert_eq!(st, 403);
    // Plain HTTP gets no answer.
    let plain = dta_http::client::exchange(
        addr,
        None,
        b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
        std::time::Duration::from_secs(3),
    );
    assert!(plain.is_err(), "plain HTTP is not served: {plain:?}");
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}
