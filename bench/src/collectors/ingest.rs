//! `dta ingest`: what an operator without DTA runs next to a database. It receives the
//! telemetry reports on a UDP socket (`recvmmsg` bursts), parses each with `dta_proto`'s
//! parser, and stores it in the database through that database's efficient native protocol:
//!
//! | Database | Key-Write (INT path) | Key-Increment (host bytes) | Append (event) | Batching |
//! |---|---|---|---|---|
//! | Redis | `SET kw:<key> <value>` | `INCRBY ctr:<key> <delta>` | `RPUSH ev:<list> <entry>` | RESP pipeline of `batch` commands |
//! | ClickHouse | `paths` (ReplacingMergeTree) | `counters` (SummingMergeTree) | `events` (MergeTree) | one RowBinary `INSERT` per table per `batch` rows, HTTP |
//! | InfluxDB 1.x | `path,flow=<hex> hops="<hex>"` | `hostbytes,host=<hex> bytes=<n>i` | `event,list=<n> entry="<hex>"` | line protocol, `POST /write` of `batch` points |
//!
//! A batch leaves when it holds `batch` reports or its oldest report waited `flush`. A report is
//! *stored* when the database acknowledged it (Redis: a non-error reply to its command;
//! ClickHouse and InfluxDB: a 200 or 204 to the request that carried it). Reports of other
//! kinds (Postcarding, Sketch-Merge) are counted and dropped. Buffers are reused: the
//! per-report path allocates nothing.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dta_collector::export::clickhouse::RowBinary;
use dta_io::udp::UdpRx;
use dta_proto::wire::report::{parse_report, ParseConfig, Primitive, Report};
use serde::{Deserialize, Serialize};

use super::http::{url_encode, HttpConn};
use super::lineproto::{hex, Field, Lines};
use super::resp::{self, Reply};

/// A database the ingest writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Db {
    /// Redis (RESP).
    Redis,
    /// ClickHouse (HTTP, RowBinary).
    ClickHouse,
    /// InfluxDB 1.x (HTTP, line protocol).
    InfluxDb,
}

impl Db {
    /// Reports per batch by default: a Redis pipeline of 1,000 commands; ClickHouse's advice of
    /// large, rare inserts (100,000 rows); InfluxDB's advice of 5,000 points per write.
    pub fn default_batch(self) -> usize {
        match self {
            Db::Redis => 1_000,
            Db::ClickHouse => 100_000,
            Db::InfluxDb => 5_000,
        }
    }

    /// Longest a report waits in a batch by default.
    pub fn default_flush(self) -> Duration {
        match self {
            Db::Redis => Duration::from_millis(10),
            Db::ClickHouse | Db::InfluxDb => Duration::from_secs(1),
        }
    }

    /// Its name, as `--db` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Db::Redis => "redis",
            Db::ClickHouse => "clickhouse",
            Db::InfluxDb => "influxdb",
        }
    }
}

/// What the ingest writes to and how.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// The database.
    pub db: Db,
    /// Its address (`host:port`: Redis's port, ClickHouse's and InfluxDB's HTTP port).
    pub server: String,
    /// The database (ClickHouse, InfluxDB) the data goes into.
    pub database: String,
    /// Reports per batch.
    pub batch: usize,
    /// Longest a report waits in a batch.
    pub flush: Duration,
    /// How to parse the reports.
    pub parse: ParseConfig,
}

impl IngestOptions {
    /// Options with `db`'s default batching.
    pub fn new(db: Db, server: &str, database: &str) -> IngestOptions {
        IngestOptions {
            db,
            server: server.to_string(),
            database: database.to_string(),
            batch: db.default_batch(),
            flush: db.default_flush(),
            parse: ParseConfig::default(),
        }
    }
}

/// What one ingest run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Datagrams that did not parse as a report.
    pub malformed: u64,
    /// Reports of a kind this ingest does not store (Postcarding, Sketch-Merge).
    pub unsupported: u64,
    /// Key-Write reports the database acknowledged.
    pub stored_keywrite: u64,
    /// Key-Increment reports the database acknowledged.
    pub stored_increment: u64,
    /// Append reports the database acknowledged.
    pub stored_append: u64,
    /// Reports the database refused (an error reply or status).
    pub refused: u64,
    /// Requests (Redis: pipelines; HTTP: POSTs) sent.
    pub requests: u64,
    /// Bytes of requests sent.
    pub request_bytes: u64,
    /// Datagrams the kernel dropped on the report socket (buffer full).
    pub kernel_drops: u64,
    /// The database's first refusal, for the operator.
    pub first_error: Option<String>,
}

impl IngestStats {
    /// Reports stored, all kinds.
    pub fn stored(&self) -> u64 {
        self.stored_keywrite + self.stored_increment + self.stored_append
    }

    fn refuse(&mut self, n: u64, why: impl FnOnce() -> String) {
        self.refused += n;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }
}

/// Report kinds, in the order of the per-kind counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    KeyWrite = 0,
    Increment = 1,
    Append = 2,
}

fn credit(st: &mut IngestStats, counts: &[u64; 3]) {
    st.stored_keywrite += counts[0];
    st.stored_increment += counts[1];
    st.stored_append += counts[2];
}

/// A database's batch of reports.
trait Sink {
    /// Adds a report (`seq`: its arrival number, 1-based); false if its kind is not stored.
    fn add(&mut self, seq: u64, r: &Report) -> bool;
    /// Reports in the batch.
    fn pending(&self) -> usize;
    /// Sends the batch and waits for the acknowledgement. `Err` only when the database cannot
    /// be reached; refusals are counted in `st`.
    fn flush(&mut self, st: &mut IngestStats) -> Result<(), String>;
}

/// Keys of the Redis data set.
pub mod redis_keys {
    /// Key-Write key `key`: `kw:` and the key's bytes.
    pub fn keywrite(key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(b"kw:");
        out.extend_from_slice(key);
    }
    /// Key-Increment key `key`: `ctr:` and the key's bytes.
    pub fn counter(key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(b"ctr:");
        out.extend_from_slice(key);
    }
    /// Append list `list`: `ev:` and its number in decimal.
    pub fn list(list: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(b"ev:");
        super::resp::push_u64(out, list as u64);
    }
}

struct RedisSink {
    conn: resp::Connection,
    commands: Vec<u8>,
    kinds: Vec<Kind>,
    key: Vec<u8>,
    num: Vec<u8>,
}

impl Sink for RedisSink {
    fn add(&mut self, _seq: u64, r: &Report) -> bool {
        let kind = match &r.primitive {
            Primitive::KeyWrite { key, value, .. } => {
                redis_keys::keywrite(key.as_bytes(), &mut self.key);
                resp::encode(&mut self.commands, &[b"SET", &self.key, value.as_bytes()]);
                Kind::KeyWrite
            }
            Primitive::KeyIncrement { key, delta, .. } => {
                redis_keys::counter(key.as_bytes(), &mut self.key);
                self.num.clear();
                resp::push_u64(&mut self.num, *delta);
                resp::encode(&mut self.commands, &[b"INCRBY", &self.key, &self.num]);
                Kind::Increment
            }
            Primitive::Append { list, value } => {
                redis_keys::list(*list, &mut self.key);
                resp::encode(&mut self.commands, &[b"RPUSH", &self.key, value.as_bytes()]);
                Kind::Append
            }
            _ => return false,
        };
        self.kinds.push(kind);
        true
    }

    fn pending(&self) -> usize {
        self.kinds.len()
    }

    fn flush(&mut self, st: &mut IngestStats) -> Result<(), String> {
        if self.kinds.is_empty() {
            return Ok(());
        }
        self.conn.send(&self.commands)?;
        st.requests += 1;
        st.request_bytes += self.commands.len() as u64;
        let mut ok = [0u64; 3];
        for i in 0..self.kinds.len() {
            let k = self.kinds[i];
            let good = self.conn.read_reply(|r| match (k, r) {
                (Kind::KeyWrite, Reply::Simple(s)) => s == b"OK",
                (Kind::Increment | Kind::Append, Reply::Integer(_)) => true,
                _ => false,
            })?;
            if good {
                ok[k as usize] += 1;
            } else {
                st.refuse(1, || format!("Redis refused a {k:?} command"));
            }
        }
        credit(st, &ok);
        self.commands.clear();
        self.kinds.clear();
        Ok(())
    }
}

/// The ClickHouse tables (one statement each, `IF NOT EXISTS`).
pub const CLICKHOUSE_SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS paths (flow String, path String, at UInt64) \
     ENGINE = ReplacingMergeTree(at) ORDER BY flow",
    "CREATE TABLE IF NOT EXISTS counters (host String, bytes UInt64) \
     ENGINE = SummingMergeTree ORDER BY host",
    "CREATE TABLE IF NOT EXISTS events (list UInt32, at UInt64, entry String) \
     ENGINE = MergeTree ORDER BY (list, at)",
];

struct ClickHouseSink {
    http: HttpConn,
    rows: [RowBinary; 3],
    targets: [String; 3],
    answer: Vec<u8>,
}

/// The request target of a ClickHouse statement in `database` (`query` in the URL).
pub fn clickhouse_target(database: &str, sql: &str) -> String {
    let mut t = String::from("/?database=");
    url_encode(database, &mut t);
    t.push_str("&query=");
    url_encode(sql, &mut t);
    t
}

impl ClickHouseSink {
    fn new(http: HttpConn, database: &str) -> ClickHouseSink {
        let t = |table: &str, cols: &str| {
            clickhouse_target(
                database,
                &format!("INSERT INTO {table} ({cols}) FORMAT RowBinary"),
            )
        };
        ClickHouseSink {
            http,
            rows: Default::default(),
            targets: [
                t("paths", "flow, path, at"),
                t("counters", "host, bytes"),
                t("events", "list, at, entry"),
            ],
            answer: Vec::new(),
        }
    }
}

impl Sink for ClickHouseSink {
    fn add(&mut self, seq: u64, r: &Report) -> bool {
        match &r.primitive {
            Primitive::KeyWrite { key, value, .. } => {
                let b = &mut self.rows[0];
                b.bytes(key.as_bytes()).bytes(value.as_bytes()).u64(seq);
                b.end_row();
            }
            Primitive::KeyIncrement { key, delta, .. } => {
                let b = &mut self.rows[1];
                b.bytes(key.as_bytes()).u64(*delta);
                b.end_row();
            }
            Primitive::Append { list, value } => {
                let b = &mut self.rows[2];
                b.u32(*list).u64(seq).bytes(value.as_bytes());
                b.end_row();
            }
            _ => return false,
        }
        true
    }

    fn pending(&self) -> usize {
        self.rows.iter().map(|r| r.rows as usize).sum()
    }

    fn flush(&mut self, st: &mut IngestStats) -> Result<(), String> {
        for k in 0..3 {
            let n = self.rows[k].rows;
            if n == 0 {
                continue;
            }
            let status = self.http.request(
                "POST",
                &self.targets[k],
                "Content-Type: application/octet-stream\r\n",
                &self.rows[k].buf,
                &mut self.answer,
            )?;
            st.requests += 1;
            st.request_bytes += self.rows[k].buf.len() as u64;
            if status == 200 {
                let mut c = [0u64; 3];
                c[k] = n;
                credit(st, &c);
            } else {
                let a = &self.answer;
                st.refuse(n, || {
                    format!(
                        "ClickHouse answered {status}: {}",
                        String::from_utf8_lossy(a).trim()
                    )
                });
            }
            self.rows[k].clear();
        }
        Ok(())
    }
}

struct InfluxSink {
    http: HttpConn,
    target: String,
    lines: Lines,
    kinds: [u64; 3],
    base_ns: u64,
    answer: Vec<u8>,
}

impl Sink for InfluxSink {
    fn add(&mut self, seq: u64, r: &Report) -> bool {
        // One nanosecond apart: no two points of a series share a timestamp (which would make
        // the later overwrite the earlier).
        let ts = Some(self.base_ns + seq);
        let (mut a, mut b) = ([0u8; 64], [0u8; 128]);
        match &r.primitive {
            Primitive::KeyWrite { key, value, .. } => {
                let k = hex(key.as_bytes(), &mut a);
                let v = hex(value.as_bytes(), &mut b);
                self.lines
                    .point("path", &[("flow", k)], &[("hops", Field::Str(v))], ts);
                self.kinds[0] += 1;
            }
            Primitive::KeyIncrement { key, delta, .. } => {
                let k = hex(key.as_bytes(), &mut a);
                self.lines.point(
                    "hostbytes",
                    &[("host", k)],
                    &[("bytes", Field::Int(*delta as i64))],
                    ts,
                );
                self.kinds[1] += 1;
            }
            Primitive::Append { list, value } => {
                let mut digits = [0u8; 10];
                let l = u32_text(*list, &mut digits);
                let v = hex(value.as_bytes(), &mut b);
                self.lines
                    .point("event", &[("list", l)], &[("entry", Field::Str(v))], ts);
                self.kinds[2] += 1;
            }
            _ => return false,
        }
        true
    }

    fn pending(&self) -> usize {
        self.lines.points
    }

    fn flush(&mut self, st: &mut IngestStats) -> Result<(), String> {
        if self.lines.points == 0 {
            return Ok(());
        }
        let status = self.http.request(
            "POST",
            &self.target,
            "Content-Type: text/plain; charset=utf-8\r\n",
            &self.lines.buf,
            &mut self.answer,
        )?;
        st.requests += 1;
        st.request_bytes += self.lines.buf.len() as u64;
        if status == 204 || status == 200 {
            credit(st, &self.kinds);
        } else {
            let n = self.lines.points as u64;
            let a = &self.answer;
            st.refuse(n, || {
                format!(
                    "InfluxDB answered {status}: {}",
                    String::from_utf8_lossy(a).trim()
                )
            });
        }
        self.lines.clear();
        self.kinds = [0; 3];
        Ok(())
    }
}

/// Decimal digits of `v` in `out`, as a `&str`.
fn u32_text(v: u32, out: &mut [u8; 10]) -> &str {
    let mut i = out.len();
    let mut v = v;
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&out[i..]).expect("digits are ASCII")
}

/// Runs one statement against ClickHouse's HTTP interface (`database` may be empty); its
/// output.
pub fn clickhouse_query(http: &mut HttpConn, database: &str, sql: &str) -> Result<String, String> {
    let mut t = String::from("/?");
    if !database.is_empty() {
        t.push_str("database=");
        url_encode(database, &mut t);
        t.push('&');
    }
    t.push_str("query=");
    url_encode(sql, &mut t);
    let mut body = Vec::new();
    let status = http.request("POST", &t, "", b"", &mut body)?;
    let text = String::from_utf8_lossy(&body).into_owned();
    if status != 200 {
        return Err(format!(
            "ClickHouse answered {status} to {sql:?}: {}",
            text.trim()
        ));
    }
    Ok(text)
}

/// Runs one InfluxQL statement (`GET /query`, or `POST` for statements that change
/// something); the JSON answer.
pub fn influx_query(
    http: &mut HttpConn,
    database: &str,
    q: &str,
    post: bool,
) -> Result<serde_json::Value, String> {
    let mut t = String::from("/query?");
    if !database.is_empty() {
        t.push_str("db=");
        url_encode(database, &mut t);
        t.push('&');
    }
    t.push_str("q=");
    url_encode(q, &mut t);
    let mut body = Vec::new();
    let status = http.request(if post { "POST" } else { "GET" }, &t, "", b"", &mut body)?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| format!("InfluxDB answered {status} to {q:?} with no JSON: {e}"))?;
    if status != 200 {
        return Err(format!("InfluxDB answered {status} to {q:?}: {v}"));
    }
    if let Some(e) = v["results"][0]["error"].as_str() {
        return Err(format!("InfluxDB: {q:?}: {e}"));
    }
    Ok(v)
}

/// Creates what the ingest writes into, if missing: ClickHouse's database and tables,
/// InfluxDB's database (Redis needs nothing). With `fresh`, drops the old data first.
pub fn prepare(db: Db, server: &str, database: &str, fresh: bool) -> Result<(), String> {
    let timeout = Duration::from_secs(30);
    match db {
        Db::Redis => {
            if fresh {
                let mut c = resp::Connection::connect(server, timeout)?;
                c.call(&[b"FLUSHALL"])?;
            }
        }
        Db::ClickHouse => {
            let mut h = HttpConn::new(server, timeout)?;
            if fresh {
                clickhouse_query(&mut h, "", &format!("DROP DATABASE IF EXISTS {database}"))?;
            }
            clickhouse_query(
                &mut h,
                "",
                &format!("CREATE DATABASE IF NOT EXISTS {database}"),
            )?;
            for s in CLICKHOUSE_SCHEMA {
                clickhouse_query(&mut h, database, s)?;
            }
        }
        Db::InfluxDb => {
            let mut h = HttpConn::new(server, timeout)?;
            if fresh {
                influx_query(&mut h, "", &format!("DROP DATABASE \"{database}\""), true)?;
            }
            influx_query(&mut h, "", &format!("CREATE DATABASE \"{database}\""), true)?;
        }
    }
    Ok(())
}

fn sink(o: &IngestOptions) -> Result<Box<dyn Sink>, String> {
    let timeout = Duration::from_secs(60);
    prepare(o.db, &o.server, &o.database, false)?;
    let cap = o.batch.max(1);
    Ok(match o.db {
        Db::Redis => Box::new(RedisSink {
            conn: resp::Connection::connect(&o.server, timeout)?,
            commands: Vec::with_capacity(cap * 64),
            kinds: Vec::with_capacity(cap),
            key: Vec::with_capacity(64),
            num: Vec::with_capacity(24),
        }),
        Db::ClickHouse => {
            let mut s = ClickHouseSink::new(HttpConn::new(&o.server, timeout)?, &o.database);
            for r in &mut s.rows {
                r.buf.reserve(cap * 48);
            }
            Box::new(s)
        }
        Db::InfluxDb => {
            let mut target = String::from("/write?precision=ns&db=");
            url_encode(&o.database, &mut target);
            let base_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            Box::new(InfluxSink {
                http: HttpConn::new(&o.server, timeout)?,
                target,
                lines: Lines {
                    buf: Vec::with_capacity(cap * 120),
                    points: 0,
                },
                kinds: [0; 3],
                base_ns,
                answer: Vec::new(),
            })
        }
    })
}

/// Shared with whoever drives the ingest: how far it got, and when to stop.
#[derive(Debug)]
pub struct Control {
    /// Datagrams received so far.
    pub received: AtomicU64,
    /// Stop once this many datagrams arrived (`u64::MAX`: not yet known).
    pub expect: AtomicU64,
    /// Stop once the socket has been idle for a second.
    pub stop: AtomicBool,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            received: AtomicU64::new(0),
            expect: AtomicU64::new(u64::MAX),
            stop: AtomicBool::new(false),
        }
    }
}

/// How long the ingest waits for missing datagrams after being told how many to expect (or
/// to stop) before it gives up on them.
const GIVE_UP: Duration = Duration::from_secs(2);

/// An ingest connected to its database, ready to receive.
pub struct Ingest {
    o: IngestOptions,
    sink: Box<dyn Sink>,
}

impl Ingest {
    /// Connects to the database and creates its tables if missing.
    pub fn connect(o: &IngestOptions) -> Result<Ingest, String> {
        Ok(Ingest {
            o: o.clone(),
            sink: sink(o)?,
        })
    }

    /// Receives, parses and stores reports from `rx` until `ctl` says stop; the last batch is
    /// flushed before returning.
    pub fn run(self, rx: UdpRx, ctl: &Control) -> Result<IngestStats, String> {
        run(&self.o, self.sink, rx, ctl)
    }
}

fn run(
    o: &IngestOptions,
    mut sink: Box<dyn Sink>,
    mut rx: UdpRx,
    ctl: &Control,
) -> Result<IngestStats, String> {
    let mut st = IngestStats::default();
    let mut seq = 0u64;
    let mut oldest: Option<Instant> = None;
    let mut idle_since: Option<Instant> = None;
    let poll = Duration::from_millis(10);
    loop {
        let wait = match oldest {
            Some(t) => o.flush.saturating_sub(t.elapsed()).min(poll),
            None => poll,
        };
        let (mut datagrams, mut malformed, mut unsupported) = (0u64, 0u64, 0u64);
        let got = rx
            .recv_with(wait, |burst| {
                for d in burst {
                    datagrams += 1;
                    match parse_report(d.payload, &o.parse) {
                        Ok(r) => {
                            seq += 1;
                            if !sink.add(seq, &r) {
                                unsupported += 1;
                            }
                        }
                        Err(_) => malformed += 1,
                    }
                }
            })
            .map_err(|e| format!("receive: {e}"))?;
        st.datagrams += datagrams;
        st.malformed += malformed;
        st.unsupported += unsupported;
        ctl.received.store(st.datagrams, Ordering::Relaxed);
        if sink.pending() > 0 && oldest.is_none() {
            oldest = Some(Instant::now());
        }
        let due = sink.pending() >= o.batch || oldest.is_some_and(|t| t.elapsed() >= o.flush);
        if due {
            sink.flush(&mut st)?;
            oldest = None;
        }
        if got > 0 {
            idle_since = None;
        }
        let expect = ctl.expect.load(Ordering::Relaxed);
        let told = expect != u64::MAX || ctl.stop.load(Ordering::Relaxed);
        if st.datagrams >= expect {
            break;
        }
        if told && got == 0 && idle_since.get_or_insert_with(Instant::now).elapsed() > GIVE_UP {
            break;
        }
    }
    sink.flush(&mut st)?;
    st.kernel_drops = rx.stats().kernel_drops;
    Ok(st)
}

/// The `dta ingest` command: prints `LISTEN <addr>` once its socket is bound, `RECEIVED <n>`
/// as datagrams arrive (at most every 20 ms), and at the end `DONE <stats as JSON>` (or
/// `ERROR <why>`). It stops after `FINISH <n>` on standard input once `n` datagrams arrived
/// (or a second after the last one), or when standard input closes and the socket goes quiet.
pub fn command(o: &IngestOptions, listen: SocketAddrV4) -> Result<IngestStats, String> {
    use std::io::{BufRead, Write};
    use std::sync::Arc;
    let sock = dta_io::udp::UdpSocket::bind(
        listen,
        &dta_io::udp::UdpOptions {
            rcvbuf: 64 << 20,
            sndbuf: 1 << 20,
            reuse_port: false,
        },
    )
    .map_err(|e| format!("bind {listen}: {e}"))?;
    let addr = sock.local_addr();
    let (rx, _tx) = sock.split();
    let ingest = Ingest::connect(o)?;
    let ctl = Arc::new(Control::default());
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "LISTEN {addr}");
        let _ = out.flush();
    }
    let c = ctl.clone();
    std::thread::Builder::new()
        .name("ingest-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.trim().strip_prefix("FINISH ") {
                    if let Ok(n) = n.trim().parse::<u64>() {
                        c.expect.store(n, Ordering::Relaxed);
                    }
                }
            }
            c.stop.store(true, Ordering::Relaxed);
        })
        .map_err(|e| e.to_string())?;
    let c = ctl.clone();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let progress = std::thread::Builder::new()
        .name("ingest-progress".into())
        .spawn(move || {
            let mut last = u64::MAX;
            while !d.load(Ordering::Relaxed) {
                let n = c.received.load(Ordering::Relaxed);
                if n != last {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "RECEIVED {n}");
                    let _ = out.flush();
                    last = n;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .map_err(|e| e.to_string())?;
    let r = ingest.run(rx, &ctl);
    done.store(true, Ordering::Relaxed);
    let _ = progress.join();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_numbers_and_redis_keys() {
        let mut d = [0u8; 10];
        assert_eq!(u32_text(0, &mut d), "0");
        assert_eq!(u32_text(u32::MAX, &mut d), "4294967295");
        let mut k = Vec::new();
        redis_keys::list(12, &mut k);
        assert_eq!(k, b"ev:12");
        redis_keys::keywrite(&[0, 1], &mut k);
        assert_eq!(k, b"kw:\x00\x01");
        redis_keys::counter(&[7], &mut k);
        assert_eq!(k, b"ctr:\x07");
    }

    #[test]
    fn clickhouse_targets_carry_the_statement() {
        assert_eq!(
            clickhouse_target("dta", "INSERT INTO paths (flow, path, at) FORMAT RowBinary"),
            "/?database=dta&query=INSERT%20INTO%20paths%20%28flow%2C%20path%2C%20at%29%20FORMAT%20RowBinary"
        );
    }
}
