//! Stores: a region of memory laid out for one primitive, plus what describes it.

use std::sync::Arc;

use dta_proto::geometry::{AppendGeometry, StoreGeometry};
use dta_proto::layout::AppendLayout;
use dta_proto::meta::{Redundancy, StoreKind, StoreMeta};

use crate::config::{CollectorConfig, StoreConfig};
use crate::memory::Region;
use crate::query::append::{ListReader, Start};
use crate::query::counter::{CounterView, Epochs};
use crate::query::estimate::{self, Estimate};
use crate::query::keywrite::KeyWriteView;
use crate::query::postcard::{PostcardView, ValueSet};
use crate::query::sketch::SketchView;
use crate::rnic::responder::{Access, Responder};

/// Append lists start on this boundary so every ring is cache-line aligned.
pub const LIST_ALIGN: u64 = 64;

/// A store as the collector hosts it.
#[derive(Clone)]
pub struct Store {
    /// Its configuration.
    pub config: StoreConfig,
    /// Its published description (address, length, R_Key, layout).
    pub meta: StoreMeta,
    /// Its memory.
    pub region: Arc<Region>,
    /// RDMA_CM port (service ID).
    pub port: u16,
    /// Epochs of a Key-Increment store (unused by the other kinds).
    pub epochs: Arc<Epochs>,
    /// The value set V of a Postcarding store (empty for the other kinds).
    pub values: Arc<ValueSet>,
    /// Its layout and hashers, derived from `meta` and validated against the region.
    pub geometry: StoreGeometry,
}

/// The layout a store's configuration implies, and its region length (validated by
/// [`StoreGeometry::of_kind`], the derivation the translator and the queries use too).
pub fn layout_of(cfg: &StoreConfig) -> Result<(StoreKind, u64), String> {
    let bad = |what: &str| format!("store {:?}: {what}", cfg.name);
    let kind = cfg.kind.layout().clone();
    let hint = match &kind {
        StoreKind::KeyWrite { .. } => {
            "slots must be a power of two and slot_size one of 8, 16, 32, 64"
        }
        StoreKind::KeyIncrement { .. } => "slots must be a power of two",
        StoreKind::Append {
            capacity,
            entry_size,
            batch,
            format,
            ..
        } => {
            let hint = "capacity must be a positive multiple of batch (1..=16), entry_size 1..=32, lists at least 1";
            AppendLayout::new(*format, *capacity, *entry_size, *batch)
                .map_err(|e| bad(&format!("{hint}: {e}")))?;
            hint
        }
        StoreKind::Postcard { hash, .. } => {
            ValueSet::new(cfg.kind.values(), *hash).map_err(|e| bad(&e))?;
            "chunks must be a power of two and hops 1..=16 (5 with the reference hash profile)"
        }
        StoreKind::Sketch { .. } => {
            sketch_shape(&kind).map_err(|e| bad(&e))?;
            "rows 1..=8 (HyperLogLog: 1), columns a power of two (HyperLogLog: 16..=65536), \
             cell_width 4 (HyperLogLog: 1), batch a power of two with batch × column record ≤ \
             1024 bytes, epochs 1..=16"
        }
    };
    let g = StoreGeometry::of_kind(&kind).map_err(|e| bad(&format!("{hint}: {e}")))?;
    let len = match (&g, &kind) {
        // Every list gets its whole stride, the last one included.
        (StoreGeometry::Append(a), _) => a
            .list_stride
            .checked_mul(a.lists as u64)
            .ok_or_else(|| bad("too large"))?,
        _ => g.used_len(),
    };
    Ok((kind, len))
}

/// Checks a Sketch-Merge layout (its file defaults filled in by
/// [`crate::config::sketch_kind`]): the shape, then the batch. Not a sketch: an error.
pub fn sketch_shape(kind: &StoreKind) -> Result<(), String> {
    use dta_proto::sketch::{record_stride, SketchShape, MAX_BATCH_BYTES};
    let StoreKind::Sketch {
        sketch,
        rows,
        columns,
        cell_width,
        batch,
        ..
    } = *kind
    else {
        return Err("not a sketch store".into());
    };
    let shape = SketchShape::new(sketch, rows, columns, cell_width).map_err(|e| {
        format!(
            "rows {rows}, columns {columns}, cell_width {cell_width}: {e} (rows 1..=8, 1 for \
             hyperloglog; columns a power of two, 16..=65536 for hyperloglog; cell_width 4, 1 \
             for hyperloglog)"
        )
    })?;
    let stride = record_stride(shape);
    if !batch.is_power_of_two() || batch * stride > MAX_BATCH_BYTES || batch > columns {
        return Err(format!(
            "batch: {batch} columns of {stride} bytes: must be a power of two, at most the \
             columns and at most {MAX_BATCH_BYTES} bytes per WRITE"
        ));
    }
    Ok(())
}

impl Store {
    /// Bytes of memory the store uses (mapped).
    pub fn memory_bytes(&self) -> usize {
        self.region.mapped_len()
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// A Key-Write query view, if this is a Key-Write store.
    pub fn keywrite(&self) -> Option<KeyWriteView<'_>> {
        match &self.geometry {
            StoreGeometry::KeyWrite { layout, hasher } => Some(KeyWriteView {
                region: &self.region,
                layout: *layout,
                hasher: *hasher,
            }),
            _ => None,
        }
    }

    /// A Key-Increment query view, if this is a Key-Increment store.
    pub fn counter(&self) -> Option<CounterView<'_>> {
        match &self.geometry {
            StoreGeometry::KeyIncrement { layout, hasher } => Some(CounterView {
                region: &self.region,
                layout: *layout,
                hasher: *hasher,
            }),
            _ => None,
        }
    }

    /// A Postcarding query view, if this is a Postcarding store.
    pub fn postcard(&self) -> Option<PostcardView<'_>> {
        match &self.geometry {
            StoreGeometry::Postcard { layout, hasher } => Some(PostcardView {
                region: &self.region,
                layout: *layout,
                hasher: *hasher,
                values: &self.values,
            }),
            _ => None,
        }
    }

    /// The N the store is written with (`None` for Append): slots per key (Key-Write),
    /// counters per key (Key-Increment), copies per chunk (Postcarding).
    pub fn redundancy(&self) -> Option<Redundancy> {
        self.meta.redundancy
    }

    /// A Sketch-Merge query view, if this is a Sketch store.
    pub fn sketch(&self) -> Option<SketchView<'_>> {
        match &self.geometry {
            StoreGeometry::Sketch { layout, sketch_id } => Some(SketchView {
                region: &self.region,
                layout: *layout,
                sketch_id: *sketch_id,
            }),
            _ => None,
        }
    }

    /// The Append layout and list stride, if this is an Append store.
    pub fn append(&self) -> Option<AppendGeometry> {
        match &self.geometry {
            StoreGeometry::Append(a) => Some(*a),
            _ => None,
        }
    }

    /// Load factor and expected success, by sampling up to `samples` slots, for the store's N
    /// (`n` only if the store records none).
    pub fn estimate(&self, samples: u32, n: u8) -> Estimate {
        let n = self.redundancy().map_or(n, Redundancy::get).max(1) as u32;
        if let Some(v) = self.keywrite() {
            return estimate::keywrite(v.occupancy(samples), n, 32);
        }
        if let Some(v) = self.counter() {
            let (o, mass) = v.occupancy(samples);
            return estimate::counter(o, mass, v.layout.slots() as u64, n);
        }
        if let Some(v) = self.postcard() {
            let copies = n;
            return estimate::postcard(
                v.occupancy(samples),
                copies,
                v.layout.hops() as u32,
                self.values.len(),
            );
        }
        if let Some(v) = self.sketch() {
            // Completeness of the newest epoch: the fraction of its expected contributions
            // merged; nothing was "lost" by a sketch.
            let done = v
                .latest_epoch()
                .map_or(0.0, |e| v.read_epoch(e).completeness().ratio());
            return estimate::sketch(done);
        }
        let a = self.append().expect("every kind is handled");
        // Finding a list's head reads every trailer of its ring: sample lists evenly so at
        // most `samples` trailers are read in all.
        let lists = a
            .lists
            .min((samples / a.layout.batch_slots().max(1)).max(1));
        let step = (a.lists / lists).max(1);
        let (mut fill, mut wrapped, mut used) = (0.0, 0u32, 0u32);
        for l in (0..a.lists).step_by(step as usize).take(lists as usize) {
            let r = ListReader::new(&self.region, a.layout, a.list_offset(l), Start::Seq(1));
            let head = r.newest_seq(&self.region);
            let slots = a.layout.batch_slots() as f64;
            fill += head as f64 / slots;
            wrapped += (head as f64 > slots) as u32;
            used += (head > 0) as u32;
        }
        let l = lists.max(1) as f64;
        estimate::append(used as f64 / l, fill / l, wrapped as f64 / l)
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
            // Never created here: a mistyped path would otherwise put the regions (and the
            // data meant to survive a restart) somewhere nobody looks.
            Some(dir) if !dir.is_dir() => {
                return Err(format!(
                    "[collector] persist_dir: {} is not an existing directory",
                    dir.display()
                ))
            }
            Some(dir) => Region::file(&dir.join(format!("dta-{}.region", sc.name)), len_usize),
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
            redundancy: sc.redundancy().and_then(Redundancy::new),
            kind,
        };
        let geometry =
            StoreGeometry::try_from(&meta).map_err(|e| format!("store {:?}: {e}", sc.name))?;
        if let StoreGeometry::Sketch { layout, sketch_id } = &geometry {
            // The header tells any reader of the raw region (a dump, a restarted collector)
            // the geometry; the translator never writes it.
            region
                .write(0, &layout.encode_header(*sketch_id))
                .map_err(|_| format!("store {:?}: region too short", sc.name))?;
        }
        let (epoch_secs, values) = match *sc.kind.layout() {
            StoreKind::KeyIncrement { .. } => (sc.kind.epoch_secs(), ValueSet::default()),
            StoreKind::Postcard { hash, .. } => (0, ValueSet::new(sc.kind.values(), hash)?),
            _ => (0, ValueSet::default()),
        };
        stores.push(Store {
            port: sc
                .cm_port(i)
                .ok_or_else(|| format!("store {:?}: no RDMA_CM port", sc.name))?,
            config: sc.clone(),
            meta,
            region,
            epochs: Arc::new(Epochs::new(epoch_secs)),
            values: Arc::new(values),
            geometry,
        });
    }
    Ok(stores)
}
