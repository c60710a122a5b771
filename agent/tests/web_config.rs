//! Issue 28, part 6: the agent's HTTP server (`metrics_listen`) takes the same web
//! configuration as the collector's control API: `web_config_file` (TLS, basic-auth users),
//! `admin_token_file` and `control_hostnames`, keys of its configuration file.

#[path = "../../io/http/tests/common/web_fixture.rs"]
mod web_fixture;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};

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
    let dir = std::env::temp_dir().join(format!("dta-agent-web-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let web = write_web_config(&dir, &data);
    let free = || {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{}", free()).parse().unwrap();
    let roce = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:{roce}\"\nmetrics_listen = \"{addr}\"\n\
             web_config_file = {web:?}\ncontrol_hostnames = [\"metrics.example\"]\n"
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_dta-agent"))
        .arg("-c")
        .arg(&cfg)
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
        panic!("the agent exited ({st}): {e}");
    }
    let (st, _) = wait_answer(addr, &data, "/metrics", "127.0.0.1", false);
    assert_eq!(st, 401);
    let (st, body) = get_tls(addr, &data, "/metrics", "127.0.0.1", true).unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("dta_agent_rnic_reads_total"), "{body}");
    assert!(
        body.contains("dta_agent_http_unauthorized_total 1"),
        "the server's own refusals are counted: {body}"
    );
    let (st, _) = get_tls(addr, &data, "/metrics", "metrics.example", true).unwrap();
    assert_eq!(st, 200);
    let (st, _) = get_tls(addr, &data, "/metrics", "rebound.attacker.example", true).unwrap();
    assert_eq!(st, 403);
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
