//! Issue 28, part 6: `GET /tail` cursors.
//! - Anonymous reads share no server-side cursor: each reader carries its own position
//!   (`from`, as `X-Dta-Next-Seq` gave it), also on a `reference`-format list, whose cursor
//!   used to live on the server under the name `_http` for every anonymous reader at once
//!   (and `from` was ignored there).
//! - Named consumers idle longer than `[collector] tail_consumer_idle_secs` are evicted (their
//!   cursors and `/metrics` series with them), so names never run out for good, and the
//!   per-consumer series stay bounded; a name in use keeps its cursor.

use std::time::Duration;

use dta_collector::client::request;
use dta_collector::{Collector, CollectorConfig};

const CONFIG: &str = r#"
[collector]
roce = "127.0.0.1:0"
control = "127.0.0.1:0"
hugepages = false

[[store]]
name = "ref"
kind = "append"
lists = 1
capacity = 16
entry_size = 4
batch = 4
format = "reference"

[[store]]
name = "seq"
kind = "append"
lists = 1
first_list = 1
capacity = 16
entry_size = 4
batch = 4
"#;

fn start(extra: &str) -> (Collector, String) {
    let cfg = CONFIG.replace(
        "hugepages = false\n",
        &format!("hugepages = false\n{extra}"),
    );
    let c = Collector::start(CollectorConfig::from_toml(&cfg).unwrap()).unwrap();
    let addr = c.control_addr().unwrap().to_string();
    (c, addr)
}

/// The entries (hex) of a `/tail` answer and its `X-Dta-Next-Seq`.
fn tail(addr: &str, path: &str) -> (Vec<String>, String) {
    let r = request(addr, "GET", path).unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    let entries = r
        .body
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["entry"].as_str().unwrap().to_string()
        })
        .collect();
    (
        entries,
        r.header("x-dta-next-seq").unwrap_or("").to_string(),
    )
}

/// Writes entry `pos` of the reference ring (list 0 of `ref`).
fn put_ref(c: &Collector, pos: u64, v: u32) {
    c.store("ref")
        .unwrap()
        .region
        .write(pos * 4, &v.to_be_bytes())
        .unwrap();
}

#[test]
fn anonymous_reads_of_a_reference_list_share_no_cursor() {
    let (c, addr) = start("");
    put_ref(&c, 0, 0x11);
    put_ref(&c, 1, 0x12);
    // Reader A, with no position: the unread entries, and where it is now.
    let (got, next) = tail(&addr, "/tail/ref/0");
    assert_eq!(got, ["00000011", "00000012"]);
    assert_eq!(next, "2");
    for (pos, v) in [(2, 0x13), (3, 0x14), (4, 0x15), (5, 0x16)] {
        put_ref(&c, pos, v);
    }
    // Reader C asks for what it wants from position 4 on, and gets exactly that.
    let (got_c, _) = tail(&addr, "/tail/ref/0?from=4");
    assert_eq!(
        got_c,
        ["00000015", "00000016"],
        "an anonymous reader's position is its own"
    );
    // A continues where it was, untouched by C.
    let (got, next2) = tail(&addr, &format!("/tail/ref/0?from={next}"));
    assert_eq!(got, ["00000013", "00000014"], "after {next}");
    assert_eq!(next2, "4");
    // A reader without a position finds nothing left unread.
    let (got_b, _) = tail(&addr, "/tail/ref/0");
    assert!(got_b.is_empty(), "{got_b:?}");
    // No anonymous reader became a named consumer (a label in /metrics).
    let m = request(&addr, "GET", "/metrics").unwrap().body;
    assert!(
        !m.contains("consumer=\"_http\""),
        "anonymous reads share a server-side cursor"
    );
}

#[test]
fn idle_consumers_are_evicted_and_names_and_labels_stay_bounded() {
    let (c, addr) = start("tail_consumer_idle_secs = 1\n");
    let sq = c.store("seq").unwrap();
    let a = sq.append().unwrap();
    let write_batch = |seq: u64| {
        let mut b = vec![seq as u8; a.layout.stride() as usize];
        let t = a.layout.encode_trailer(seq, 4);
        let at = b.len() - t.len();
        b[at..].copy_from_slice(&t);
        let off = a.list_offset(0) + a.layout.batch_offset(a.layout.slot_for_seq(seq));
        sq.region.write(off, &b).unwrap();
    };
    write_batch(1);
    // Names are label-safe and short.
    for bad in ["a b", "x\"y", &"n".repeat(65)] {
        let r = request(
            &addr,
            "GET",
            &format!(
                "/tail/seq/1?consumer={}",
                bad.replace(' ', "%20").replace('"', "%22")
            ),
        )
        .unwrap();
        assert_eq!(r.status, 400, "consumer {bad:?}: {}", r.body);
    }
    // Fill the table: "keeper" and as many others as fit.
    let (got, next) = tail(&addr, "/tail/seq/1?consumer=keeper");
    assert_eq!((got.len(), next.as_str()), (4, "2"));
    let mut n = 1;
    loop {
        let r = request(&addr, "GET", &format!("/tail/seq/1?consumer=c{n}")).unwrap();
        if r.status == 409 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        n += 1;
        assert!(n <= 4096, "the consumer table is bounded");
    }
    let full = n;
    let m = request(&addr, "GET", "/metrics").unwrap().body;
    assert!(m.contains("consumer=\"c1\""), "named consumers have series");
    // keeper keeps reading; the others go idle.
    std::thread::sleep(Duration::from_millis(600));
    write_batch(2);
    let (got, next) = tail(&addr, "/tail/seq/1?consumer=keeper");
    assert_eq!(
        (got.len(), next.as_str()),
        (4, "3"),
        "keeper's cursor is kept"
    );
    std::thread::sleep(Duration::from_millis(700));
    // The idle ones are gone: their names are free, and their series too.
    let m = request(&addr, "GET", "/metrics").unwrap().body;
    assert!(
        !m.contains("consumer=\"c1\""),
        "an evicted consumer's series stays"
    );
    assert!(m.contains("consumer=\"keeper\""));
    for k in 1..full {
        let r = request(&addr, "GET", &format!("/tail/seq/1?consumer=new{k}")).unwrap();
        assert_eq!(r.status, 200, "new{k}: {}", r.body);
    }
    // Full again, and nobody idle: the next name waits.
    let r = request(&addr, "GET", "/tail/seq/1?consumer=one-too-many").unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    write_batch(3);
    let (got, next) = tail(&addr, "/tail/seq/1?consumer=keeper");
    assert_eq!((got.len(), next.as_str()), (4, "4"));
    assert!(
        m.lines().any(
            |l| l.starts_with("dta_collector_append_consumers_evicted_total ")
                && !l.ends_with(" 0")
        ),
        "evictions are counted"
    );
}
