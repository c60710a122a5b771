//! The translator's `/metrics` + `/stats` endpoint runs on the control plane's bounded server
//! (`dta-http`): an oversized header gets 431 instead of being buffered, a foreign origin 403,
//! and the endpoints still answer. The limits themselves are tested in `io/http/tests`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dta_translator::control::metrics::MetricsServer;
use dta_translator::driver::WorkerSnapshot;

fn send(addr: SocketAddrV4, req: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_metrics_endpoint_is_bounded() {
    let snaps = Arc::new(vec![Mutex::new(WorkerSnapshot::default())]);
    let m = MetricsServer::spawn(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), snaps).unwrap();
    let a = m.addr;
    let ok = send(
        a,
        format!("GET /metrics HTTP/1.0\r\nHost: {a}\r\n\r\n").as_bytes(),
    );
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
    assert!(ok.contains("# TYPE dta_translator_"), "{ok}");
    let stats = send(
        a,
        format!("GET /stats?pretty HTTP/1.0\r\nHost: {a}\r\n\r\n").as_bytes(),
    );
    assert!(
        stats.starts_with("HTTP/1.0 200") && stats.contains("\"workers\""),
        "{stats}"
    );
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: {a}\r\nX: {}\r\n\r\n",
        "a".repeat(64 << 10)
    );
    assert!(send(a, big.as_bytes()).starts_with("HTTP/1.1 431"));
    let cross = send(
        a,
        format!("GET /metrics HTTP/1.0\r\nHost: {a}\r\nOrigin: http://evil.example\r\n\r\n")
            .as_bytes(),
    );
    assert!(cross.starts_with("HTTP/1.0 403"), "{cross}");
    assert!(send(
        a,
        format!("GET /nope HTTP/1.0\r\nHost: {a}\r\n\r\n").as_bytes()
    )
    .starts_with("HTTP/1.0 404"));
    assert!(send(
        a,
        format!("DELETE /metrics HTTP/1.0\r\nHost: {a}\r\n\r\n").as_bytes()
    )
    .starts_with("HTTP/1.0 405"));
}
