//! A web configuration for the servers' tests: TLS with tests/data's certificate (localhost,
//! 127.0.0.1, signed by ca.pem) and one basic-auth user, `prom` / `scrape-me`; and a client
//! that speaks to it over verified TLS.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;

/// The password of user `prom`.
pub const PASSWORD: &str = "scrape-me";

/// tests/data, from any crate's manifest directory in the workspace.
pub fn data_dir(manifest_dir: &str) -> PathBuf {
    let mut d = Path::new(manifest_dir).to_path_buf();
    while !d.join("io/http/tests/data").is_dir() {
        assert!(d.pop(), "no io/http/tests/data above {manifest_dir}");
    }
    d.join("io/http/tests/data")
}

/// Writes `web.toml` into `dir` (TLS and user `prom`) and returns its path.
pub fn write_web_config(dir: &Path, data: &Path) -> PathBuf {
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let p = dir.join("web.toml");
    std::fs::write(
        &p,
        format!(
            "[tls_server_config]\ncert_file = {:?}\nkey_file = {:?}\n[basic_auth_users]\nprom = \"{hash}\"\n",
            data.join("server.pem"),
            data.join("server.key")
        ),
    )
    .unwrap();
    p
}

/// `GET path` over TLS trusting ca.pem, with `host` as the Host header and, if `auth`,
/// prom's credentials: (status, body), or the transport error.
pub fn get_tls(
    addr: SocketAddr,
    data: &Path,
    path: &str,
    host: &str,
    auth: bool,
) -> Result<(u16, String), String> {
    let tls = dta_http::client::ClientTls {
        config: dta_http::tls::client_config(&data.join("ca.pem")).unwrap(),
        server_name: "localhost".into(),
    };
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n");
    if auth {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("prom:{PASSWORD}"));
        req.push_str(&format!("Authorization: Basic {b}\r\n"));
    }
    req.push_str("\r\n");
    let limits = dta_http::client::ClientLimits {
        timeout: Duration::from_secs(10),
        ..Default::default()
    };
    dta_http::client::fetch(addr, Some(&tls), req.as_bytes(), &limits)
        .map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))
        .map_err(|e| e.to_string())
}

/// Polls `GET path` until the server answers (it may still be starting).
pub fn wait_answer(
    addr: SocketAddr,
    data: &Path,
    path: &str,
    host: &str,
    auth: bool,
) -> (u16, String) {
    let t0 = std::time::Instant::now();
    loop {
        match get_tls(addr, data, path, host, auth) {
            Ok(r) => return r,
            Err(e) if t0.elapsed() > Duration::from_secs(20) => panic!("{addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
