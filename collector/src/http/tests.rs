use super::tail::consumer_name_ok;
use super::*;
use crate::query::append::{ListReader, Start};
use crate::query::keys::parse_key;
use dta_proto::hash::MAX_REDUNDANCY;
use dta_proto::Key;
use proptest::prelude::*;

fn state() -> ControlState {
    let config = CollectorConfig::from_toml(
        r#"
[collector]
hugepages = false
[[store]]
name = "kw"
kind = "keywrite"
slots = 16
[[store]]
name = "ki"
kind = "keyincrement"
slots = 16
[[store]]
name = "ap"
kind = "append"
lists = 2
capacity = 4
batch = 2
[[store]]
name = "ap-ref"
kind = "append"
lists = 1
first_list = 2
capacity = 4
batch = 2
format = "reference"
[[store]]
name = "pc"
kind = "postcard"
chunks = 16
values = [[1, 9]]
"#,
    )
    .unwrap();
    let mut rnic =
        crate::rnic::responder::Responder::new(crate::rnic::responder::DeviceConfig::default());
    let stores = crate::store::build_stores(&config, &mut rnic).unwrap();
    ControlState {
        stores,
        published: Arc::new(Mutex::new(Published::default())),
        config,
        roce: "127.0.0.1:4791".parse().unwrap(),
        started: Instant::now(),
        requests: AtomicU64::new(0),
        consumers: Mutex::new(Consumers::new(Duration::from_secs(600))),
        http: dta_http::StatsHandle::default(),
        admin_enabled: true,
        pull: None,
    }
}

#[test]
fn consumers_are_bounded_and_the_idle_ones_forgotten() {
    let st = state();
    let s = &st.stores[2];
    let a = s.append().unwrap();
    let make = || ListReader::new(&s.region, a.layout, a.list_offset(0), Start::Oldest);
    let mut c = Consumers::new(Duration::from_secs(10));
    let t0 = Instant::now();
    let key = |n: usize| ("ap".to_string(), 0, format!("c{n}"));
    for n in 0..MAX_CONSUMERS {
        assert!(c.get_or_insert(key(n), t0, make).is_some());
    }
    assert!(
        c.get_or_insert(key(MAX_CONSUMERS), t0, make).is_none(),
        "full"
    );
    // c0 is asked for again at 6 s; at 12 s the others are idle past 10 s.
    assert!(c
        .get_or_insert(key(0), t0 + Duration::from_secs(6), make)
        .is_some());
    let t = t0 + Duration::from_secs(12);
    assert!(c.get_or_insert(key(MAX_CONSUMERS), t, make).is_some());
    assert_eq!((c.len(), c.evicted), (2, MAX_CONSUMERS as u64 - 1));
    assert!(
        c.iter().any(|(k, _)| k.2 == "c0"),
        "a consumer in use is kept"
    );
    for bad in ["", "a b", "x\"y", "é", &"n".repeat(65)] {
        assert!(!consumer_name_ok(bad), "{bad:?}");
    }
    assert!(consumer_name_ok("exporter-1.ops:tail_2"));
}

#[test]
fn routes_and_statuses() {
    let st = state();
    for (m, u, want) in [
        ("GET", "/stores", 200),
        ("GET", "/stats", 200),
        ("GET", "/metrics", 200),
        ("GET", "/query/keywrite/kw/00", 200),
        ("GET", "/query/keywrite/kw/1.2.3.4:1-5.6.7.8:2/udp", 200),
        (
            "GET",
            "/query/keywrite/kw/1.2.3.4:1-5.6.7.8:2%2Fudp?n=2&threshold=1",
            200,
        ),
        ("GET", "/query/counter/ki/00?n=2", 200),
        ("GET", "/query/counter/ki/00?n=9", 400),
        ("GET", "/query/path/pc/00", 200),
        ("GET", "/tail/ap/1?from=newest", 200),
        ("GET", "/tail/ap-ref/2", 200),
        ("POST", "/epoch/ki", 200),
        ("GET", "/query/keywrite/kw/00?n=300", 400),
        ("GET", "/query/path/kw/00", 400),
        ("GET", "/tail/ap/2", 404),
        ("GET", "/tail/ap/x", 400),
        ("GET", "/tail/ap/1?from=soon", 400),
        ("POST", "/epoch/kw", 400),
        ("GET", "/query/nope/kw/00", 404),
        ("DELETE", "/stores", 405),
        ("GET", "/", 404),
        ("GET", "/query/keywrite/kw", 400),
        ("GET", "/query/keywrite", 400),
        ("GET", "/query", 400),
        ("GET", "/tail/ap", 200),
        ("GET", "/tail/ap-ref", 400),
        ("GET", "/tail/kw", 400),
        ("GET", "/tail/ap/1/2", 400),
        ("POST", "/epoch", 400),
        ("POST", "/query/keywrite/kw/00", 405),
    ] {
        let r = handle(&st, m, u, &Access::Admin, b"");
        assert_eq!(r.status, want, "{m} {u}: {}", r.body);
    }
    assert!(handle(&st, "GET", "/metrics", &Access::Anonymous, b"")
        .body
        .contains("# TYPE dta_collector_epoch gauge"));
}

proptest! {
    #[test]
    fn any_request_gets_an_answer(method in "GET|POST|PUT|[A-Z]{0,8}",
                                  url in "/[a-z/%0-9.:?=&-]{0,60}|\\PC{0,80}") {
        let st = state();
        let r = handle(&st, &method, &url, &Access::Admin, b"");
        prop_assert!([200, 400, 404, 405, 409].contains(&r.status), "{} {}", r.status, r.body);
        let r = handle(&st, &method, &url, &Access::Anonymous, b"");
        prop_assert!([200, 400, 401, 404, 405, 409].contains(&r.status), "{} {}", r.status, r.body);
    }

    #[test]
    fn any_bulk_body_gets_an_answer(kind in "keywrite|counter|path|x",
                                    body in prop::collection::vec(any::<u8>(), 0..300)) {
        let st = state();
        let store = match kind.as_str() { "keywrite" => "kw", "counter" => "ki", _ => "pc" };
        let r = handle(&st, "POST", &format!("/query/{kind}/{store}"), &Access::Anonymous, &body);
        prop_assert!([200, 400, 404].contains(&r.status), "{} {}", r.status, r.body);
    }
}

fn get(st: &ControlState, url: &str) -> (u16, Value) {
    let r = handle(st, "GET", url, &Access::Anonymous, b"");
    let v = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

/// Adds `count` to the key's N counters, as the translator's FETCH_ADDs do.
fn increment(st: &ControlState, key: &Key, n: usize, count: u64) {
    let s = st.stores.iter().find(|s| s.name() == "ki").unwrap();
    let v = s.counter().unwrap();
    let mut slots = [0u32; MAX_REDUNDANCY];
    v.hasher.slots(key, n, &mut slots);
    for &slot in &slots[..n] {
        s.region
            .fetch_add(v.layout.slot_offset(slot), count)
            .unwrap();
    }
}

#[test]
fn queries_read_the_stores_n_and_refuse_another_unless_forced() {
    let st = state();
    let key = parse_key("0a0b").unwrap();
    // The store is written with N = 2 (the default); queries default to it.
    increment(&st, &key, 2, 7);
    let (status, v) = get(&st, "/query/counter/ki/0a0b");
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["estimate"].as_u64(), v["n"].as_u64()),
        (Some(7), Some(2))
    );
    assert_eq!(v["redundancy"], 2);
    assert!(v.get("forced").is_none(), "{v}");
    assert_eq!(get(&st, "/query/counter/ki/0a0b?n=2").1["estimate"], 7);
    // Reading 4 counters (max_redundancy, the old default) would answer 0, below the
    // true count: refused, and answered only when forced, marked as such.
    let (status, v) = get(&st, "/query/counter/ki/0a0b?n=4");
    assert_eq!(status, 400, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("N=2") && e.contains("force=1"), "{e}");
    let (status, v) = get(&st, "/query/counter/ki/0a0b?n=4&force=1");
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["estimate"].as_u64(), v["forced"].as_bool()),
        (Some(0), Some(true))
    );
    assert_eq!(
        get(&st, "/query/keywrite/kw/00?n=1&force=true").1["forced"],
        true
    );
    // n must be 1..=8 (0 is not rounded up, 99 not accepted).
    for n in ["0", "9", "99", "300", "-1", "x"] {
        let (status, v) = get(&st, &format!("/query/counter/ki/0a0b?n={n}"));
        assert_eq!(status, 400, "n={n}: {v}");
    }
    let (_, v) = get(&st, "/query/counter/ki/0a0b?n=0");
    assert!(v["error"].as_str().unwrap().contains("1..=8"), "{v}");
    // threshold and copies: 1..=n, a 400 (not a "conflict") above.
    let (status, v) = get(&st, "/query/keywrite/kw/00?threshold=3");
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("n=2"), "{v}");
    assert_eq!(get(&st, "/query/keywrite/kw/00?threshold=0").0, 400);
    assert_eq!(get(&st, "/query/keywrite/kw/00?threshold=2").0, 200);
    assert_eq!(get(&st, "/query/path/pc/00?copies=2").0, 400); // the store's N is 1
    assert_eq!(get(&st, "/query/path/pc/00?copies=1").0, 200);
    // Parameters a query does not take, and a bad force, are errors too.
    assert_eq!(get(&st, "/query/counter/ki/00?threshold=1").0, 400);
    assert_eq!(get(&st, "/query/counter/ki/00?m=2").0, 400);
    assert_eq!(get(&st, "/query/counter/ki/00?n=4&force=maybe").0, 400);
    // A missing key is a 400 that says what is missing.
    let (status, v) = get(&st, "/query/counter/ki");
    assert_eq!(status, 400);
    assert!(v["error"].as_str().unwrap().contains("no key"), "{v}");
    // /stores shows each store's N.
    let (_, stores) = get(&st, "/stores");
    let n_of = |name: &str| {
        stores
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["redundancy"].clone())
            .unwrap()
    };
    assert_eq!(
        (n_of("kw"), n_of("ki"), n_of("pc")),
        (json!(2), json!(2), json!(1))
    );
    assert_eq!(n_of("ap"), Value::Null);
}

#[test]
fn bulk_queries_answer_one_line_per_key_in_order() {
    let st = state();
    for (k, c) in [("01", 1u64), ("02", 2), ("03", 3)] {
        increment(&st, &parse_key(k).unwrap(), 2, c);
    }
    let lines = |r: &Reply| -> Vec<Value> {
        r.body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // One key per line; blank lines and comments are skipped; order is kept.
    let r = handle(
        &st,
        "POST",
        "/query/counter/ki",
        &Access::Anonymous,
        b"03\n# a comment\n\n01\r\nnot-a-key\n02\n",
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, "application/x-ndjson");
    let v = lines(&r);
    assert_eq!(v.len(), 4);
    assert_eq!(
        v.iter().map(|l| l["estimate"].as_u64()).collect::<Vec<_>>(),
        [Some(3), Some(1), None, Some(2)]
    );
    assert_eq!(v[0]["key"], "03");
    assert_eq!(v[2]["input"], "not-a-key");
    assert!(v[2]["error"].is_string());
    // A JSON array; the parameters apply to every key (forced, and so flagged).
    let r = handle(
        &st,
        "POST",
        "/query/counter/ki?n=1&force=1",
        &Access::Anonymous,
        br#"["02", "1.2.3.4:1-5.6.7.8:2/udp"]"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = lines(&r);
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|l| l["forced"] == true && l["n"] == 1));
    // Key-Write and path stores answer in bulk too.
    let r = handle(
        &st,
        "POST",
        "/query/keywrite/kw",
        &Access::Anonymous,
        b"00\n01\n",
    );
    assert_eq!((r.status, lines(&r).len()), (200, 2));
    assert!(lines(&r).iter().all(|l| l["result"] == "empty"));
    let r = handle(&st, "POST", "/query/path/pc", &Access::Anonymous, b"00\n");
    assert_eq!(
        (r.status, lines(&r)[0]["result"].clone()),
        (200, json!("empty"))
    );
    // The same rules as a single query.
    assert_eq!(
        handle(
            &st,
            "POST",
            "/query/counter/ki?n=4",
            &Access::Anonymous,
            b"00"
        )
        .status,
        400
    );
    assert_eq!(
        handle(&st, "POST", "/query/counter/kw", &Access::Anonymous, b"00").status,
        400
    );
    assert_eq!(
        handle(
            &st,
            "POST",
            "/query/counter/nope",
            &Access::Anonymous,
            b"00"
        )
        .status,
        404
    );
    // No keys, a body that is not UTF-8, a broken JSON array: 400.
    for body in [
        &b""[..],
        b"\n# only a comment\n",
        b"\xff\xfe",
        b"[\"00\", 1]",
        b"[1",
    ] {
        let r = handle(&st, "POST", "/query/counter/ki", &Access::Anonymous, body);
        assert_eq!(r.status, 400, "{body:?}: {}", r.body);
    }
    // Too many keys, or a body longer than the limit: 413.
    let many = "00\n".repeat(MAX_BULK_KEYS + 1);
    let r = handle(
        &st,
        "POST",
        "/query/counter/ki",
        &Access::Anonymous,
        many.as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.body);
    let exactly = "00\n".repeat(MAX_BULK_KEYS);
    let r = handle(
        &st,
        "POST",
        "/query/counter/ki",
        &Access::Anonymous,
        exactly.as_bytes(),
    );
    assert_eq!((r.status, r.body.lines().count()), (200, MAX_BULK_KEYS));
    let huge = vec![b'\n'; MAX_BODY + 1];
    let r = handle(&st, "POST", "/query/counter/ki", &Access::Anonymous, &huge);
    assert_eq!(r.status, 413, "{}", r.body);
}

#[test]
fn admin_endpoints_and_rdma_coordinates_need_the_admin_token() {
    let mut st = state();
    let user = Access::User("prom".into());
    let r = handle(&st, "POST", "/epoch/ki", &Access::Anonymous, b"");
    assert_eq!(r.status, 401);
    assert!(r
        .headers
        .iter()
        .any(|(k, v)| *k == "WWW-Authenticate" && v.starts_with("Bearer")));
    assert_eq!(handle(&st, "POST", "/epoch/ki", &user, b"").status, 403);
    assert_eq!(
        handle(&st, "POST", "/epoch/ki", &Access::Admin, b"").status,
        200
    );
    for who in [&Access::Anonymous, &user] {
        let v: Value = serde_json::from_str(&handle(&st, "GET", "/stores", who, b"").body).unwrap();
        for s in v.as_array().unwrap() {
            assert!(s["meta"].get("rkey").is_none() && s["meta"].get("addr").is_none());
            assert!(s["meta"].get("qps").is_none() && s["name"].is_string());
        }
    }
    let v: Value =
        serde_json::from_str(&handle(&st, "GET", "/stores", &Access::Admin, b"").body).unwrap();
    assert!(v[0]["meta"]["rkey"].as_u64().unwrap() > 0);
    // Without a configured token nobody administers.
    st.admin_enabled = false;
    let r = handle(&st, "POST", "/epoch/ki", &Access::Anonymous, b"");
    assert_eq!(r.status, 403, "{}", r.body);
}

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode("a%2Fb%2fc"), "a/b/c");
    assert_eq!(percent_decode("%zz%2"), "%zz%2");
    assert_eq!(percent_decode("%"), "%");
    let p = query_params("n=2&threshold=1&x");
    assert_eq!(p["n"], "2");
    assert_eq!(p["x"], "");
}
