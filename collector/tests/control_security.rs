//! The control API's security end to end, against running collectors: the admin token
//! (401/403/200), the stores' RDMA coordinates visible to admin only, cross-origin requests
//! refused, TLS and basic auth from a web configuration, the start refused for a token file
//! others can read, and the metadata file readable by its owner only.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use dta_collector::client::{request, Endpoint};
use dta_collector::{Collector, CollectorConfig};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

const STORES: &str = r#"
[[store]]
name = "paths"
kind = "keywrite"
slots = 1024
[[store]]
name = "counts"
kind = "keyincrement"
slots = 1024
[[store]]
name = "events"
kind = "append"
lists = 2
capacity = 16
batch = 4
[[store]]
name = "more"
kind = "keywrite"
slots = 1024
"#;

/// A private scratch directory (removed on drop).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("dta-sec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        Scratch(d)
    }

    fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start(collector_extra: &str) -> Result<Collector, String> {
    let toml = format!(
        "[collector]\nroce = \"127.0.0.1:0\"\ncontrol = \"127.0.0.1:0\"\nhugepages = false\n\
         {collector_extra}\n{STORES}"
    );
    Collector::start(CollectorConfig::from_toml(&toml)?)
}

fn with_token(s: &Scratch) -> Collector {
    let f = s.file("token", &format!("{TOKEN}\n"), 0o600);
    start(&format!("admin_token_file = {f:?}")).unwrap()
}

fn admin(addr: &str) -> Endpoint {
    Endpoint {
        token: Some(TOKEN.into()),
        ..Endpoint::plain(addr)
    }
}

fn json(r: dta_collector::client::Response) -> Value {
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

#[test]
fn admin_endpoints_need_the_admin_token() {
    let s = Scratch::new("admin");
    let c = with_token(&s);
    let a = c.control_addr().unwrap().to_string();
    // Without a token: 401 with a Bearer challenge; with a wrong one: 401.
    let r = request(&a, "POST", "/epoch/counts").unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    let wrong = Endpoint {
        token: Some("ffffffffffffffffffffffffffffffff".into()),
        ..Endpoint::plain(&a)
    };
    assert_eq!(wrong.request("POST", "/epoch/counts").unwrap().status, 401);
    assert_eq!(c.store("counts").unwrap().epochs.info().epoch, 0);
    // With it: the epoch moves.
    let v = json(admin(&a).request("POST", "/epoch/counts").unwrap());
    assert_eq!(v["epoch"]["epoch"], 1);
    // Reads need nothing (no basic_auth_users configured).
    assert_eq!(request(&a, "GET", "/metrics").unwrap().status, 200);
    c.shutdown();
    // No token configured: the admin endpoints are off, whatever is sent.
    let c = start("").unwrap();
    let a = c.control_addr().unwrap().to_string();
    let r = request(&a, "POST", "/epoch/counts").unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("admin_token_file"), "{}", r.body);
    assert_eq!(
        admin(&a).request("POST", "/epoch/counts").unwrap().status,
        401
    );
}

#[test]
fn rdma_coordinates_are_for_admin_only() {
    let s = Scratch::new("stores");
    let c = with_token(&s);
    let a = c.control_addr().unwrap().to_string();
    let open = json(request(&a, "GET", "/stores").unwrap());
    for st in open.as_array().unwrap() {
        let m = &st["meta"];
        assert!(st["name"].is_string() && st["kind"].is_string(), "{st}");
        assert!(st["region_bytes"].as_u64().unwrap() > 0);
        for secret in ["addr", "rkey", "qps"] {
            assert!(
                m.get(secret).is_none(),
                "{secret} visible without the token: {st}"
            );
        }
    }
    assert!(!open.to_string().contains("rkey"));
    let full = json(admin(&a).request("GET", "/stores").unwrap());
    for (st, s) in full.as_array().unwrap().iter().zip(&c.stores) {
        assert_eq!(st["meta"]["rkey"].as_u64(), Some(s.meta.rkey as u64));
        assert_eq!(st["meta"]["addr"].as_u64(), Some(s.meta.addr));
    }
    let stats = json(request(&a, "GET", "/stats").unwrap());
    assert!(stats["qps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|q| q["qpn"].is_null()));
}

#[test]
fn a_cross_origin_post_is_refused_even_with_the_token() {
    let s = Scratch::new("origin");
    let c = with_token(&s);
    let a = c.control_addr().unwrap();
    let send = |extra: &str| {
        let raw = dta_http::client::exchange(
            std::net::SocketAddr::V4(a),
            None,
            format!(
                "POST /epoch/counts HTTP/1.0\r\nHost: {a}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 {extra}\r\n"
            )
            .as_bytes(),
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        dta_http::client::parse_answer(&raw).unwrap().status
    };
    // What a page's fetch(..., {method: "POST", body: "x"}) looks like.
    assert_eq!(
        send("Origin: http://attacker.example\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: 0\r\n"),
        403
    );
    assert_eq!(send("Origin: http://attacker.example\r\n"), 403);
    assert_eq!(send("Sec-Fetch-Site: same-site\r\n"), 403);
    assert_eq!(
        send("Content-Type: text/plain\r\nContent-Length: 0\r\n"),
        403
    );
    // A DNS-rebinding name for our address.
    let raw = dta_http::client::exchange(
        std::net::SocketAddr::V4(a),
        None,
        b"GET /stores HTTP/1.0\r\nHost: rebound.attacker.example:9100\r\n\r\n",
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(dta_http::client::parse_answer(&raw).unwrap().status, 403);
    assert_eq!(c.store("counts").unwrap().epochs.info().epoch, 0);
    // Our own origin passes.
    assert_eq!(send(&format!("Origin: http://{a}\r\n")), 200);
}

#[test]
fn a_token_file_others_can_read_refuses_the_start() {
    let s = Scratch::new("perm");
    let f = s.file("token", TOKEN, 0o644);
    let e = start(&format!("admin_token_file = {f:?}")).err().unwrap();
    assert!(e.contains("chmod 600"), "{e}");
    let f = s.file("short", "tooshort", 0o600);
    assert!(start(&format!("admin_token_file = {f:?}")).is_err());
}

fn cert(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../io/http/tests/data")
        .join(name)
}

#[test]
fn tls_and_basic_auth_from_the_web_config() {
    let s = Scratch::new("tls");
    let token = s.file("token", TOKEN, 0o600);
    let web = s.file(
        "web.toml",
        &format!(
            "[tls_server_config]\ncert_file = {:?}\nkey_file = {:?}\n[basic_auth_users]\n\
             prometheus = {:?}\n",
            cert("server.pem"),
            cert("server.key"),
            bcrypt::hash("scrape", 4).unwrap()
        ),
        0o600,
    );
    let c = start(&format!(
        "admin_token_file = {token:?}\nweb_config_file = {web:?}"
    ))
    .unwrap();
    let a = c.control_addr().unwrap().to_string();
    let tls = Endpoint::plain(&a).with_tls(&cert("ca.pem")).unwrap();
    assert_eq!(tls.request("GET", "/metrics").unwrap().status, 401);
    let user = Endpoint {
        basic: Some(("prometheus".into(), "scrape".into())),
        ..tls.clone()
    };
    let r = user.request("GET", "/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.contains("dta_collector_cm_rejected_total"));
    let wrong = Endpoint {
        basic: Some(("prometheus".into(), "guess".into())),
        ..tls.clone()
    };
    assert_eq!(wrong.request("GET", "/metrics").unwrap().status, 401);
    // A basic-auth user reads, but does not administer.
    assert_eq!(user.request("POST", "/epoch/counts").unwrap().status, 403);
    let root = Endpoint {
        token: Some(TOKEN.into()),
        ..tls
    };
    assert_eq!(root.request("POST", "/epoch/counts").unwrap().status, 200);
    // Plain HTTP gets nowhere.
    assert!(request(&a, "GET", "/metrics").is_err());
}

#[test]
fn the_metadata_file_is_readable_by_its_owner_only() {
    let s = Scratch::new("meta");
    let dir = s.0.join("run/dta");
    let f = dir.join("collector.json");
    let c = start(&format!(
        "metadata_file = {f:?}\n[[static_peer]]\nroce = \"127.0.0.2:4791\""
    ))
    .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f), 0o600);
    assert_eq!(mode(&dir), 0o700, "created 0700");
    let meta: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    assert!(meta["stores"][0]["rkey"].as_u64().unwrap() > 0);
    c.shutdown();
    assert!(!f.exists());
    // A directory other users can write to is refused.
    let open = s.0.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = start(&format!("metadata_file = {:?}", open.join("m.json")))
        .err()
        .unwrap();
    assert!(e.contains("can be written by other users"), "{e}");
    let e = start("metadata_file = \"/tmp/dta-collector-meta.json\"")
        .err()
        .unwrap();
    assert!(e.contains("/tmp"), "{e}");
}
