//! Membership of a collector cluster: the cluster file's partitioning turned into the
//! pipelines' routes, and the epoch switch.
//!
//! The routes of an epoch are computed here, off the datapath, as tables of store indices
//! ([`RouteSet`]): the key slot table with each collector replaced by its keyed store, and
//! the Append list ranges with each collector replaced by its Append store. A worker looks a
//! report up in them exactly as in `[routing] key-hash` mode.
//!
//! A [`RouteBoard`] carries the current epoch's routes to the workers: each worker compares
//! one atomic generation number per loop iteration (never per packet) and, when it changed,
//! copies the new routes in. The `dta-cluster` thread ([`spawn_watcher`]) publishes a new
//! generation when the active epoch changes: at a partition's `start` time, or when the
//! cluster file changes on disk (it is re-read every [`WATCH_INTERVAL`]). A file that does not
//! parse, or names a collector this translator is not connected to, is logged and ignored:
//! the routes in force stay.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dta_proto::cluster::{Cluster, Partition};
use dta_proto::meta::{CollectorMeta, StoreKind};

use crate::datapath::pipeline::{ListRoute, Route, RouteSet};

/// How often the watcher re-reads the cluster file and checks epoch start times.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The routes of `p`, an epoch of `cluster`, over this translator's stores (`collectors` in
/// connection order, flattened collector by collector as the pipelines index them). Kinds the
/// cluster names no store for keep `fallback` (the `[routing]` rules).
pub fn cluster_routes(
    cluster: &Cluster,
    p: &Partition,
    collectors: &[(String, CollectorMeta)],
    fallback: (Route, Route, Route),
) -> Result<RouteSet, String> {
    let at = format!("cluster {:?} epoch {}", cluster.name, p.number);
    // (collector name, store name, kind name) → flat store index.
    let mut flat = Vec::new();
    for (cn, m) in collectors {
        for s in &m.stores {
            flat.push((cn.as_str(), s));
        }
    }
    let store_of = |ci: usize, kind: &str, store: &str| -> Result<usize, String> {
        let cn = &cluster.collectors[ci].endpoint.name;
        if !collectors.iter().any(|(n, _)| n == cn) {
            return Err(format!(
                "{at}: collector {cn:?} is not one of this translator's collectors (restart the \
                 translator with the cluster file that names it)"
            ));
        }
        flat.iter()
            .position(|(n, s)| n == cn && s.name == store && s.kind.name() == kind)
            .ok_or_else(|| {
                let have: Vec<String> = flat
                    .iter()
                    .filter(|(n, _)| n == cn)
                    .map(|(_, s)| format!("{} ({})", s.name, s.kind.name()))
                    .collect();
                format!(
                    "{at}: collector {cn:?} has no {kind} store {store:?} (its stores: {})",
                    have.join(", ")
                )
            })
    };
    let keyed = |kind: &str, name: &Option<String>, fb: Route| -> Result<Route, String> {
        let Some(name) = name else { return Ok(fb) };
        let table = p
            .keys
            .iter()
            .map(|&ci| store_of(ci, kind, name))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Route::ByKeyHash(table))
    };
    let (kw, ki, pc) = fallback;
    let keywrite = keyed("keywrite", &cluster.stores.keywrite, kw)?;
    let keyincrement = keyed("keyincrement", &cluster.stores.keyincrement, ki)?;
    let postcard = keyed("postcard", &cluster.stores.postcard, pc)?;
    let mut append = Vec::new();
    if let Some(name) = &cluster.stores.append {
        for r in &p.lists {
            let si = store_of(r.collector, "append", name)?;
            if let StoreKind::Append {
                first_list, lists, ..
            } = flat[si].1.kind
            {
                let (a, b) = (
                    u64::from(first_list),
                    u64::from(first_list) + u64::from(lists),
                );
                if u64::from(r.first) < a || r.end > b {
                    return Err(format!(
                        "{at}: lists {}..{} belong to {:?}, but its append store {name:?} holds \
                         lists {a}..{b}",
                        r.first, r.end, cluster.collectors[r.collector].endpoint.name
                    ));
                }
            }
            append.push(ListRoute {
                first: r.first,
                end: r.end,
                store: si,
            });
        }
    }
    for s in &p.sketches {
        let si = store_of(s.collector, "sketch", &s.store)?;
        if let StoreKind::Sketch { sketch_id, .. } = flat[si].1.kind {
            if sketch_id != s.id {
                return Err(format!(
                    "{at}: sketch {} belongs to {:?} store {:?}, which serves sketch {sketch_id}",
                    s.id, cluster.collectors[s.collector].endpoint.name, s.store
                ));
            }
        }
    }
    Ok(RouteSet {
        epoch: p.number,
        keywrite,
        keyincrement,
        postcard,
        append,
    })
}

/// The current epoch's routes, for the workers to pick up.
#[derive(Debug)]
pub struct RouteBoard {
    generation: AtomicU64,
    routes: Mutex<Arc<RouteSet>>,
}

impl RouteBoard {
    /// A board holding `routes` as generation 1.
    pub fn new(routes: RouteSet) -> RouteBoard {
        RouteBoard {
            generation: AtomicU64::new(1),
            routes: Mutex::new(Arc::new(routes)),
        }
    }

    /// The generation of the routes on the board (a cheap load; compare with the last seen).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The routes on the board and their generation.
    pub fn current(&self) -> (u64, Arc<RouteSet>) {
        let r = self.routes.lock().expect("route board lock");
        (self.generation.load(Ordering::Acquire), r.clone())
    }

    /// Puts new routes up.
    pub fn publish(&self, routes: RouteSet) {
        let mut r = self.routes.lock().expect("route board lock");
        *r = Arc::new(routes);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Starts the `dta-cluster` thread: it re-reads `path` every [`WATCH_INTERVAL`] and puts the
/// routes of the epoch active at the time up on `board` whenever the active epoch (or the
/// file) changes, until `stop`.
pub fn spawn_watcher(
    path: PathBuf,
    mut cluster: Arc<Cluster>,
    collectors: Vec<(String, CollectorMeta)>,
    fallback: (Route, Route, Route),
    board: Arc<RouteBoard>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name("dta-cluster".into())
        .spawn(move || {
            let mut text = std::fs::read(&path).unwrap_or_default();
            let mut routed = board.current().1.epoch;
            // The epoch last tried with the file as it is (a failure is logged once).
            let mut tried = routed;
            let mut changed = false;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(WATCH_INTERVAL);
                if let Ok(now) = std::fs::read(&path) {
                    if now != text {
                        text = now;
                        match crate::config::load_cluster(&path) {
                            Ok(c) => {
                                log::info!(
                                    "cluster file {} changed: epochs up to {}",
                                    path.display(),
                                    c.epoch
                                );
                                cluster = Arc::new(c);
                                changed = true;
                            }
                            Err(e) => log::error!("{e}; keeping the routes of epoch {routed}"),
                        }
                    }
                }
                let p = cluster.active_at(unix_now());
                if p.number == tried && !changed {
                    continue;
                }
                changed = false;
                tried = p.number;
                match cluster_routes(&cluster, p, &collectors, fallback.clone()) {
                    Ok(rs) => {
                        log::info!(
                            "cluster {:?}: routing by epoch {} (was {routed})",
                            cluster.name,
                            p.number
                        );
                        routed = p.number;
                        board.publish(rs);
                    }
                    Err(e) => log::error!("{e}; keeping the routes of epoch {routed}"),
                }
            }
        })
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TranslatorConfig;
    use crate::datapath::pipeline::Pipeline;
    use dta_proto::batch::{Datagram, TxBatch};
    use dta_proto::hash::HashProfile;
    use dta_proto::meta::{QpMeta, Redundancy, StoreMeta};
    use dta_proto::wire::report::{Primitive, Priority, Profile, Report, ReportHeader};
    use dta_proto::{Key, Value};
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn store(name: &str, kind: StoreKind, qpn: u32) -> StoreMeta {
        StoreMeta {
            name: name.into(),
            addr: 0x1000,
            len: 1 << 24,
            rkey: 1,
            qps: vec![QpMeta {
                qpn,
                psn: 0,
                peer_qpn: 0x100 + qpn,
            }],
            redundancy: kind.has_redundancy().then(|| Redundancy::new(2)).flatten(),
            kind,
        }
    }

    /// Collectors c1..c3 at 127.0.0.1..3, each with Key-Write "kw", Key-Increment "ki" and
    /// Append "ap" holding lists 0..16.
    fn collectors() -> Vec<(String, CollectorMeta)> {
        (1..=3u8)
            .map(|i| {
                let q = u32::from(i) * 0x10;
                let kw = StoreKind::KeyWrite {
                    slots: 1024,
                    slot_size: 8,
                    hash: HashProfile::Independent,
                };
                let ki = StoreKind::KeyIncrement {
                    slots: 1024,
                    hash: HashProfile::Independent,
                };
                let ap = StoreKind::Append {
                    lists: 16,
                    first_list: 0,
                    capacity: 64,
                    entry_size: 4,
                    batch: 1,
                    format: dta_proto::layout::AppendFormat::Sequenced,
                    list_stride: 4096,
                };
                (
                    format!("c{i}"),
                    CollectorMeta {
                        roce: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, i), 4791),
                        mac: "02:00:00:00:00:51".into(),
                        verify_icrc: true,
                        stores: vec![
                            store("kw", kw, q),
                            store("ki", ki, q + 1),
                            store("ap", ap, q + 2),
                        ],
                    },
                )
            })
            .collect()
    }

    const FILE: &str = r#"
[cluster]
name = "t"
epoch = 2
[stores]
keywrite = "kw"
keyincrement = "ki"
append = "ap"
[[collector]]
name = "c1"
metadata = "c1.json"
[[collector]]
name = "c2"
metadata = "c2.json"
[[collector]]
name = "c3"
metadata = "c3.json"
[[epoch]]
number = 1
keys = ["c1", "c2", "c3"]
lists = [{ collector = "c1", first = 0, count = 5 }, { collector = "c2", first = 5, count = 11 }]
[[epoch]]
number = 2
keys = ["c1", "c2", "c1", "c3", "c3", "c2"]
lists = [{ collector = "c3", first = 0, count = 5 }, { collector = "c2", first = 5, count = 11 }]
"#;

    fn none3() -> (Route, Route, Route) {
        (Route::None, Route::None, Route::None)
    }

    fn pipeline(cfg: &TranslatorConfig, cs: &[(String, CollectorMeta)]) -> Pipeline {
        let local = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), 4791);
        let (pc, targets) = crate::driver::pipeline_for(cfg, 0, local, cs).expect("config");
        Pipeline::new(pc, &targets).expect("pipeline")
    }

    /// The collector IP the pipeline sends `r`'s frames to.
    fn sent_to(p: &mut Pipeline, r: &Report) -> Option<Ipv4Addr> {
        let mut buf = [0u8; 256];
        let n = r.emit(Profile::Extended, &mut buf).unwrap();
        let d = Datagram {
            src: "10.0.0.1:5000".parse().unwrap(),
            dst: "127.0.0.9:40040".parse().unwrap(),
            ip: None,
            payload: &buf[..n],
        };
        let mut tx = TxBatch::new(64, 2048);
        p.handle_reports(0, &[d], &mut tx);
        p.flush_all(0, &mut tx);
        let ips: Vec<Ipv4Addr> = (0..tx.len()).map(|i| *tx.dest(i).ip()).collect();
        assert!(ips.windows(2).all(|w| w[0] == w[1]), "{ips:?}");
        ips.first().copied()
    }

    fn header() -> ReportHeader {
        ReportHeader {
            profile: Profile::Extended,
            immediate: false,
            retransmittable: false,
            seq: None,
            priority: Priority::Medium,
        }
    }

    #[test]
    fn every_key_and_list_goes_to_the_owner_the_cluster_names() {
        let cluster = Cluster::from_toml(FILE).unwrap();
        let cs = collectors();
        let ip_of = |c: usize| *cs[c].1.roce.ip();
        let mut key_hash_cfg = TranslatorConfig::default();
        key_hash_cfg.routing.keywrite = "key-hash".into();
        key_hash_cfg.routing.keyincrement = "key-hash".into();
        let mut by_key_hash = pipeline(&key_hash_cfg, &cs);
        for e in [1, 2] {
            let part = cluster.epoch(e).unwrap();
            let rs = cluster_routes(&cluster, part, &cs, none3()).unwrap();
            let mut p = pipeline(&TranslatorConfig::default(), &cs);
            p.set_routes(&rs).unwrap();
            assert_eq!(p.route_epoch(), Some(e));
            for k in 0u32..600 {
                let key = Key::new(&(k.wrapping_mul(2_654_435_761)).to_be_bytes()).unwrap();
                let owner = part.key_owner(key.as_bytes()).unwrap();
                let kw = Report {
                    header: header(),
                    primitive: Primitive::KeyWrite {
                        redundancy: 2,
                        key,
                        value: Value::new(&[1, 2, 3, 4]).unwrap(),
                    },
                };
                assert_eq!(
                    sent_to(&mut p, &kw),
                    Some(ip_of(owner)),
                    "epoch {e} key {k}"
                );
                if e == 1 {
                    // One slot per collector is the `[routing] key-hash` rule.
                    assert_eq!(sent_to(&mut by_key_hash, &kw), Some(ip_of(owner)));
                }
                let ki = Report {
                    header: header(),
                    primitive: Primitive::KeyIncrement {
                        redundancy: 2,
                        key,
                        delta: 1,
                    },
                };
                assert_eq!(
                    sent_to(&mut p, &ki),
                    Some(ip_of(owner)),
                    "epoch {e} key {k}"
                );
            }
            for list in 0..16u32 {
                let r = Report {
                    header: header(),
                    primitive: Primitive::Append {
                        list,
                        value: Value::new(&[9, 9, 9, 9]).unwrap(),
                    },
                };
                let owner = part.list_owner(list).unwrap();
                assert_eq!(sent_to(&mut p, &r), Some(ip_of(owner)), "list {list}");
            }
        }
    }

    #[test]
    fn routes_the_stores_cannot_serve_are_refused() {
        let cluster = Cluster::from_toml(FILE).unwrap();
        let p1 = cluster.epoch(1).unwrap();
        // A translator connected to c1 and c2 only cannot route epoch 1 (c3 owns a key slot).
        let two = collectors()[..2].to_vec();
        let e = cluster_routes(&cluster, p1, &two, none3()).unwrap_err();
        assert!(e.contains("\"c3\" is not one of this translator's"), "{e}");
        // A collector without the named store.
        let mut cs = collectors();
        cs[1].1.stores[0].name = "paths".into();
        let e = cluster_routes(&cluster, p1, &cs, none3()).unwrap_err();
        assert!(e.contains("\"c2\" has no keywrite store \"kw\""), "{e}");
        // Lists the owner's store does not hold.
        let mut cs = collectors();
        if let StoreKind::Append { lists, .. } = &mut cs[1].1.stores[2].kind {
            *lists = 8;
        }
        let e = cluster_routes(&cluster, p1, &cs, none3()).unwrap_err();
        assert!(e.contains("lists 5..16 belong to \"c2\""), "{e}");
        // The pipeline checks what it is handed as well.
        let cs = collectors();
        let mut p = pipeline(&TranslatorConfig::default(), &cs);
        let mut rs = cluster_routes(&cluster, p1, &cs, none3()).unwrap();
        rs.keywrite = Route::ByKeyHash(vec![1]);
        assert!(p.set_routes(&rs).is_err(), "store #1 is Key-Increment");
        assert_eq!(p.route_epoch(), None, "refused routes leave the old ones");
    }

    #[test]
    fn the_board_hands_new_routes_to_workers_by_generation() {
        let cluster = Cluster::from_toml(FILE).unwrap();
        let cs = collectors();
        let r1 = cluster_routes(&cluster, cluster.epoch(1).unwrap(), &cs, none3()).unwrap();
        let r2 = cluster_routes(&cluster, cluster.epoch(2).unwrap(), &cs, none3()).unwrap();
        let b = RouteBoard::new(r1);
        let g = b.generation();
        assert_eq!(b.current().1.epoch, 1);
        b.publish(r2);
        assert_ne!(b.generation(), g);
        assert_eq!(b.current().1.epoch, 2);
    }
}
