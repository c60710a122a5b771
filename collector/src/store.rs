//! Stores: a region of memory laid out for one primitive, plus what describes it.

use std::sync::Arc;

use dta_proto::hash::{KeyHasher, PostcardHasher};
use dta_proto::layout::{AppendLayout, CounterLayout, KeyWriteLayout, PostcardLayout};
use dta_proto::meta::{StoreKind, StoreMeta};

use crate::config::{CollectorConfig, StoreConfig, StoreKindConfig};
use crate::memory::Region;
use crate::rnic::responder::{Access, Responder};

/// Append lists start on this boundary so every ring is cache-line aligned.
pub const LIST_ALIGN: u64 = 64;

/// A store as the collector hosts it.
pub struct Store {
    /// Its configuration.
    pub config: StoreConfig,
    /// Its published description (address, length, R_Key, layout).
    pub meta: StoreMeta,
    /// Its memory.
    pub region: Arc<Region>,
    /// RDMA_CM port (service ID).
    pub port: u16,
}

/// The layout a store's configuration implies, and its region length.
pub fn layout_of(cfg: &StoreConfig) -> Result<(StoreKind, u64), String> {
    let bad = |what: &str| format!("store {:?}: {what}", cfg.name);
    Ok(match &cfg.kind {
        StoreKindConfig::KeyWrite {
            slots,
            slot_size,
            hash,
        } => {
            let l = KeyWriteLayout::new(*slots, *slot_size).map_err(|e| {
                bad(&format!(
                    "slots must be a power of two and slot_size one of 8, 16, 32, 64: {e}"
                ))
            })?;
            KeyHasher::new(*hash, *slots).ok_or_else(|| bad("unsupported slot count"))?;
            (
                StoreKind::KeyWrite {
                    slots: *slots,
                    slot_size: *slot_size,
                    hash: *hash,
                },
                l.region_len(),
            )
        }
        StoreKindConfig::KeyIncrement { slots, hash, .. } => {
            let l = CounterLayout::new(*slots)
                .map_err(|e| bad(&format!("slots must be a power of two: {e}")))?;
            KeyHasher::new(*hash, *slots).ok_or_else(|| bad("unsupported slot count"))?;
            (
                StoreKind::KeyIncrement {
                    slots: *slots,
                    hash: *hash,
                },
                l.region_len(),
            )
        }
        StoreKindConfig::Append {
            lists,
            first_list,
            capacity,
            entry_size,
            batch,
            format,
        } => {
            if *lists == 0 {
                return Err(bad("lists must be at least 1"));
            }
            let l = AppendLayout::new(*format, *capacity, *entry_size, *batch)
                .map_err(|e| bad(&format!("capacity must be a positive multiple of batch (1..=16), entry_size 1..=32: {e}")))?;
            let stride = l.region_len().div_ceil(LIST_ALIGN) * LIST_ALIGN;
            let len = stride
                .checked_mul(*lists as u64)
                .ok_or_else(|| bad("too large"))?;
            (
                StoreKind::Append {
                    lists: *lists,
                    first_list: *first_list,
                    capacity: *capacity,
                    entry_size: *entry_size,
                    batch: *batch,
                    format: *format,
                    list_stride: stride,
                },
                len,
            )
        }
        StoreKindConfig::Postcard {
            chunks, hops, hash, ..
        } => {
            let l = PostcardLayout::new(*chunks, *hops).map_err(|e| {
                bad(&format!(
                    "chunks must be a power of two and hops 1..=16: {e}"
                ))
            })?;
            PostcardHasher::new(*hash, *chunks, 2, *hops)
                .ok_or_else(|| bad("the reference hash profile needs hops = 5"))?;
            (
                StoreKind::Postcard {
                    chunks: *chunks,
                    hops: *hops,
                    hash: *hash,
                },
                l.region_len(),
            )
        }
    })
}

impl Store {
    /// Bytes of memory the store uses (mapped).
    pub fn memory_bytes(&self) -> usize {
        self.region.mapped_len()
    }
}

/// Allocates every configured store's region and registers it with `responder`.
pub fn build_stores(
    config: &CollectorConfig,
    responder: &mut Responder,
) -> Result<Vec<Store>, String> {
    build_stores_with(config, |region| {
        Some(responder.register(region.clone(), Access::ALL).0)
    })
}

/// Allocates every configured store's region; `register` registers it with an RNIC and
/// returns its R_Key, or `None` when registration happens later (the real-RNIC backend
/// registers per device; the store's `meta.rkey` is then 0 until it does).
pub fn build_stores_with(
    config: &CollectorConfig,
    mut register: impl FnMut(&Arc<Region>) -> Option<u32>,
) -> Result<Vec<Store>, String> {
    let dev = &config.collector;
    let mut stores = Vec::new();
    for (i, sc) in config.stores.iter().enumerate() {
        let (kind, len) = layout_of(sc)?;
        let len_usize =
            usize::try_from(len).map_err(|_| format!("store {:?} too large", sc.name))?;
        let region = match &dev.persist_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                Region::file(&dir.join(format!("dta-{}.region", sc.name)), len_usize)
            }
            None => Region::anonymous(len_usize, dev.hugepages),
        }
        .map_err(|e| format!("store {:?}: cannot allocate {len} bytes: {e}", sc.name))?;
        let region = Arc::new(region);
        let rkey = register(&region);
        log::info!(
            "store {:?}: {} {} bytes at {:#x} ({}), {}",
            sc.name,
            kind.name(),
            len,
            region.addr(),
            region.backing(),
            match rkey {
                Some(k) => format!("rkey {k:#x}"),
                None => "registered per RDMA device".to_string(),
            }
        );
        let meta = StoreMeta {
            name: sc.name.clone(),
            addr: region.addr(),
            len,
            rkey: rkey.unwrap_or(0),
            qps: Vec::new(),
            kind,
        };
        stores.push(Store {
            port: sc.port.unwrap_or(1337 + i as u16),
            config: sc.clone(),
            meta,
            region,
        });
    }
    Ok(stores)
}
