//! Who may call: basic auth users (bcrypt), the admin bearer token, same-origin checks, and
//! all of it over TLS with the test certificate in tests/data.

mod common;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use dta_http::client::{exchange, parse_answer, ClientTls};
use dta_http::{AdminToken, BasicAuth, HostPolicy, ServerOptions, WebConfig};

const TOKEN: &str = "an-admin-token-of-32-characters!";

fn basic(user: &str, pass: &str) -> String {
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

fn users() -> BasicAuth {
    BasicAuth::new([("prom".to_string(), bcrypt::hash("scrape-me", 4).unwrap())].into()).unwrap()
}

#[test]
fn basic_auth_and_the_admin_token_decide_access() {
    let s = serve_with(ServerOptions {
        basic_auth: Some(users()),
        admin_token: Some(AdminToken::new(TOKEN).unwrap()),
        ..ServerOptions::default()
    });
    let a = s.local_addr();
    let (st, text) = get(a, "GET", "/metrics", "");
    assert_eq!(st, Some(401));
    assert!(
        text.to_ascii_lowercase()
            .contains("\r\nwww-authenticate: basic realm"),
        "{text}"
    );
    assert_eq!(
        get(a, "GET", "/metrics", &basic("prom", "wrong")).0,
        Some(401)
    );
    assert_eq!(
        get(a, "GET", "/metrics", &basic("eve", "scrape-me")).0,
        Some(401)
    );
    let (st, text) = get(a, "GET", "/metrics", &basic("prom", "scrape-me"));
    assert_eq!(st, Some(200));
    assert!(text.ends_with("GET /metrics User(\"prom\") 0\n"), "{text}");
    // The admin token is accepted in place of basic credentials, and only the right one.
    let (st, text) = get(
        a,
        "POST",
        "/epoch/x",
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    assert_eq!(st, Some(200));
    assert!(text.ends_with("POST /epoch/x Admin 0\n"), "{text}");
    let (st, text) = get(
        a,
        "POST",
        "/epoch/x",
        "Authorization: Bearer not-the-token-at-all\r\n",
    );
    assert_eq!(st, Some(401));
    assert!(text.contains("invalid_token"), "{text}");
    assert_eq!(s.stats().unauthorized, 4);
}

#[test]
fn without_users_reads_are_open_and_a_wrong_token_is_still_refused() {
    let s = serve_with(ServerOptions {
        admin_token: Some(AdminToken::new(TOKEN).unwrap()),
        ..ServerOptions::default()
    });
    let a = s.local_addr();
    let (st, text) = get(a, "GET", "/q", "");
    assert_eq!(st, Some(200));
    assert!(text.ends_with("GET /q Anonymous 0\n"));
    assert_eq!(
        get(
            a,
            "GET",
            "/q",
            "Authorization: Bearer nope-nope-nope-nope\r\n"
        )
        .0,
        Some(401)
    );
    // No token configured at all: a bearer token is refused, never taken for admin.
    let s = serve_with(ServerOptions::default());
    assert_eq!(
        get(
            s.local_addr(),
            "POST",
            "/epoch/x",
            &format!("Authorization: Bearer {TOKEN}\r\n")
        )
        .0,
        Some(401)
    );
}

#[test]
fn cross_origin_requests_are_refused() {
    let s = serve_with(ServerOptions {
        hosts: HostPolicy::Checked(vec![]),
        ..ServerOptions::default()
    });
    let a = s.local_addr();
    // The attack of the issue: a page's cross-site POST with Content-Type text/plain.
    let (st, text) = get(
        a,
        "POST",
        "/epoch/counts",
        "Origin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n",
    );
    assert_eq!(st, Some(403), "{text}");
    // The same without an Origin (older browsers) is still a simple cross-site request.
    let (st, _) = raw(
        a,
        b"POST /epoch/counts HTTP/1.0\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(st, Some(403));
    assert_eq!(
        get(a, "GET", "/metrics", "Sec-Fetch-Site: cross-site\r\n").0,
        Some(403)
    );
    assert_eq!(get(a, "GET", "/metrics", "Origin: null\r\n").0, Some(403));
    // DNS rebinding: a foreign name for our address.
    assert_eq!(
        raw(
            a,
            b"GET /stores HTTP/1.0\r\nHost: rebind.evil.example\r\n\r\n"
        )
        .0,
        Some(403)
    );
    // Our own origin, and API clients, pass.
    assert_eq!(
        get(
            a,
            "POST",
            "/epoch/counts",
            &format!("Origin: http://{a}\r\n")
        )
        .0,
        Some(200)
    );
    assert_eq!(
        get(
            a,
            "POST",
            "/q",
            "Content-Type: application/json\r\nContent-Length: 0\r\n"
        )
        .0,
        Some(200)
    );
    assert_eq!(s.stats().forbidden, 5);
}

fn data(f: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(f)
}

#[test]
fn tls_and_basic_auth_from_a_web_config_file() {
    let dir = std::env::temp_dir().join(format!("dta-http-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let web = dir.join("web.toml");
    std::fs::write(
        &web,
        format!(
            "[tls_server_config]\ncert_file = {:?}\nkey_file = {:?}\n\n[basic_auth_users]\n\
             prom = {:?}\n",
            data("server.pem"),
            data("server.key"),
            bcrypt::hash("scrape-me", 4).unwrap()
        ),
    )
    .unwrap();
    let w = WebConfig::load(&web).unwrap();
    let s = dta_http::Server::spawn(
        "127.0.0.1:0".parse().unwrap(),
        ServerOptions::default().with_web_config(&w).unwrap(),
        echo(),
    )
    .unwrap();
    let a = s.local_addr();
    let tls = ClientTls {
        config: dta_http::tls::client_config(&data("ca.pem")).unwrap(),
        server_name: "127.0.0.1".into(),
    };
    let req = |auth: &str| {
        let raw = exchange(
            a,
            Some(&tls),
            format!("GET /metrics HTTP/1.0\r\nHost: {a}\r\n{auth}\r\n").as_bytes(),
            Duration::from_secs(10),
        )
        .unwrap();
        parse_answer(&raw).unwrap()
    };
    assert_eq!(req("").status, 401);
    let r = req(&basic("prom", "scrape-me"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"GET /metrics User(\"prom\") 0\n");
    // By name as well as by address.
    let by_name = ClientTls {
        server_name: "localhost".into(),
        ..tls.clone()
    };
    let raw = exchange(
        a,
        Some(&by_name),
        format!(
            "GET / HTTP/1.0\r\nHost: localhost:{}\r\n{}\r\n",
            a.port(),
            basic("prom", "scrape-me")
        )
        .as_bytes(),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(parse_answer(&raw).unwrap().status, 200);
    // Plain HTTP to the TLS port gets no answer, and a client that does not trust the
    // certificate fails its handshake.
    let (st, _) = get(a, "GET", "/metrics", &basic("prom", "scrape-me"));
    assert_eq!(st, None);
    let wrong_ca = ClientTls {
        config: dta_http::tls::client_config(&data("server.pem")).unwrap(),
        server_name: "example.com".into(),
    };
    assert!(exchange(
        a,
        Some(&wrong_ca),
        b"GET / HTTP/1.0\r\n\r\n",
        Duration::from_secs(5)
    )
    .is_err());
    let t0 = std::time::Instant::now();
    while s.stats().tls_handshake_failures < 2 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.stats().tls_handshake_failures, 2);
    // Cross-origin checks know the scheme: an http:// origin is foreign to an https server.
    let raw = exchange(
        a,
        Some(&tls),
        format!(
            "GET / HTTP/1.0\r\nHost: {a}\r\nOrigin: http://{a}\r\n{}\r\n",
            basic("prom", "scrape-me")
        )
        .as_bytes(),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(parse_answer(&raw).unwrap().status, 403);
    std::fs::remove_dir_all(&dir).unwrap();
}
