//! `GET /tail/{store}/{list}` (an Append list's new entries, stateless or from a named
//! consumer's cursor) and `GET /tail/{store}` (every list's head), and the named consumers
//! themselves ([`Consumers`]: bounded, the idle ones forgotten; `/metrics` reads them). Reads
//! store memory through [`crate::query::append::ListReader`]; no routing here.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{find_store, num, ControlState, Reply, MAX_CONSUMERS, MAX_CONSUMER_NAME};
use crate::query::append::{ListReader, Start};
use crate::query::keys::to_hex;

/// Most batches one `/tail` request returns.
const MAX_TAIL_BATCHES: usize = 4096;

/// A named consumer's key: (store, global list, consumer name).
pub(crate) type ConsumerKey = (String, u32, String);

/// A named consumer: its cursor, and when it was last asked for.
#[derive(Debug)]
pub(crate) struct Consumer {
    pub(crate) reader: ListReader,
    used: Instant,
}

/// The named `/tail` consumers: at most [`MAX_CONSUMERS`]; one not asked for in `idle` is
/// forgotten (cursor and `/metrics` series), so names free up and the series stay bounded.
#[derive(Debug)]
pub(crate) struct Consumers {
    map: HashMap<ConsumerKey, Consumer>,
    idle: Duration,
    /// Consumers forgotten for being idle.
    pub(crate) evicted: u64,
}

impl Consumers {
    pub(crate) fn new(idle: Duration) -> Consumers {
        Consumers {
            map: HashMap::new(),
            idle,
            evicted: 0,
        }
    }

    /// Forgets every consumer idle for longer than the limit at `now`.
    pub(crate) fn sweep(&mut self, now: Instant) {
        let idle = self.idle;
        let before = self.map.len();
        self.map
            .retain(|_, c| now.saturating_duration_since(c.used) <= idle);
        self.evicted += (before - self.map.len()) as u64;
    }

    /// The consumer `key`, made with `make` if new; `None` if the table is full of consumers
    /// in use.
    pub(crate) fn get_or_insert(
        &mut self,
        key: ConsumerKey,
        now: Instant,
        make: impl FnOnce() -> ListReader,
    ) -> Option<&mut ListReader> {
        self.sweep(now);
        if self.map.len() >= MAX_CONSUMERS && !self.map.contains_key(&key) {
            return None;
        }
        let c = self.map.entry(key).or_insert_with(|| Consumer {
            reader: make(),
            used: now,
        });
        c.used = now;
        Some(&mut c.reader)
    }

    /// Every consumer.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ConsumerKey, &ListReader)> {
        self.map.iter().map(|(k, c)| (k, &c.reader))
    }

    /// Consumers kept now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Whether `name` may name a consumer: 1..=64 bytes of letters, digits, `_ . - :`.
pub(super) fn consumer_name_ok(name: &str) -> bool {
    (1..=MAX_CONSUMER_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':'))
}

pub(super) fn tail(
    state: &ControlState,
    store: &str,
    list: &str,
    p: &HashMap<String, String>,
) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    let a = s
        .append()
        .ok_or_else(|| Reply::error(400, format!("store {:?} is not an Append store", s.name())))?;
    let id: u32 = list
        .parse()
        .map_err(|_| Reply::error(400, format!("list {list:?} is not a number")))?;
    let local = a.local_list(id).ok_or_else(|| {
        Reply::error(
            404,
            format!(
                "store {:?} holds lists {}..{}",
                s.name(),
                a.first_list,
                a.first_list as u64 + a.lists as u64
            ),
        )
    })?;
    let max = num::<usize>(p, "max")?
        .unwrap_or(MAX_TAIL_BATCHES)
        .clamp(1, MAX_TAIL_BATCHES);
    let base = a.list_offset(local);
    let start = match p.get("from").map(String::as_str) {
        None | Some("oldest") => Start::Oldest,
        Some("newest") => Start::Newest,
        Some(v) => Start::Seq(v.parse().map_err(|_| {
            Reply::error(
                400,
                format!("from={v:?}: use a batch number, oldest or newest"),
            )
        })?),
    };
    let consumer = p.get("consumer").cloned();
    if let Some(c) = &consumer {
        if !consumer_name_ok(c) {
            return Err(Reply::error(
                400,
                format!(
                    "consumer {c:?}: use 1..={MAX_CONSUMER_NAME} letters, digits, '_', '.', \
                     '-' or ':'"
                ),
            ));
        }
    }
    let mut body = String::new();
    let mut emit = |seq: u64, e: &[u8]| {
        let _ = writeln!(
            body,
            "{}",
            json!({ "list": id, "seq": seq, "entry": to_hex(e) })
        );
    };
    let (next, lost, head) = match consumer {
        Some(c) => {
            let mut m = state.consumers.lock().expect("consumers lock");
            let k = (s.name().to_string(), id, c);
            let r = m
                .get_or_insert(k, Instant::now(), || {
                    ListReader::new(&s.region, a.layout, base, start)
                })
                .ok_or_else(|| {
                    Reply::error(
                        409,
                        format!(
                            "too many named consumers in use (at most {MAX_CONSUMERS}; one \
                             unused for tail_consumer_idle_secs is forgotten)"
                        ),
                    )
                })?;
            let st = r.poll(&s.region, max, &mut emit);
            (r.next_seq(), st.lost_batches, r.newest_seq(&s.region))
        }
        None => {
            // Stateless: the reader starts where `from` says (a reference-format list's entry
            // position, as its last X-Dta-Next-Seq gave it) and nothing is kept here.
            let mut r = ListReader::new(&s.region, a.layout, base, start);
            let st = r.poll(&s.region, max, &mut emit);
            (r.next_seq(), st.lost_batches, r.newest_seq(&s.region))
        }
    };
    Ok(Reply {
        status: 200,
        content_type: "application/x-ndjson",
        headers: vec![
            ("X-Dta-Next-Seq", next.to_string()),
            ("X-Dta-Lost-Batches", lost.to_string()),
            ("X-Dta-Head-Seq", head.to_string()),
        ],
        body,
    })
}

/// `GET /tail/{store}`: every list's head (its newest batch sequence number, 0 if none), so a
/// follower of many lists (the ClickHouse exporter) asks only the lists that moved.
pub(super) fn heads(state: &ControlState, store: &str) -> Result<Reply, Reply> {
    let s = find_store(state, store)?;
    let a = s
        .append()
        .ok_or_else(|| Reply::error(400, format!("store {:?} is not an Append store", s.name())))?;
    if a.layout.format() != dta_proto::layout::AppendFormat::Sequenced {
        return Err(Reply::error(
            400,
            format!(
                "store {:?} has the reference format: its lists have no sequence numbers",
                s.name()
            ),
        ));
    }
    let heads: Vec<u64> = (0..a.lists)
        .map(|l| {
            ListReader::new(&s.region, a.layout, a.list_offset(l), Start::Seq(1))
                .newest_seq(&s.region)
        })
        .collect();
    Ok(Reply::json(
        200,
        json!({ "store": s.name(), "first_list": a.first_list, "heads": heads }),
    ))
}
