//! Postcarding: the per-hop postcards of a flow are cached until the path is complete (or the
//! entry ages out, or another flow needs its slot) and written as one chunk: every hop's value
//! XORed with that hop's checksum of the flow, blank hops marked, `redundancy` copies.
//!
//! With several workers, cache index `h` belongs to worker `h % workers` and is stored at
//! `h / workers`.

use std::collections::VecDeque;

use dta_proto::batch::TxBatch;
use dta_proto::hash::{PostcardHasher, MAX_HOPS, MAX_REDUNDANCY};
use dta_proto::layout::PostcardLayout;
use dta_proto::wire::report::{PostcardFields, Primitive, Report};
use dta_proto::Key;

use super::{PrimitiveConfig, Refusal, Shard, StorePrimitive};
use crate::datapath::sender::QpSender;
use crate::datapath::stats::TranslatorCounters;

/// No precomputed cache index.
pub const NO_HINT: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct CacheEntry {
    flow: Key,
    occupied: bool,
    immediate: bool,
    path_len: u8,
    /// Hops present (the bits of `mask`).
    count: u8,
    mask: u16,
    gen: u32,
    values: [u32; MAX_HOPS],
}

const EMPTY: CacheEntry = CacheEntry {
    flow: Key::EMPTY,
    occupied: false,
    immediate: false,
    path_len: 0,
    count: 0,
    mask: 0,
    gen: 0,
    values: [0; MAX_HOPS],
};

/// A Postcarding store's cache.
pub struct Postcarding {
    hasher: PostcardHasher,
    layout: PostcardLayout,
    hops: u8,
    redundancy: u8,
    flush_ns: u64,
    workers: usize,
    cache: Vec<CacheEntry>,
    deadlines: VecDeque<(u64, u32, u32)>,
}

impl Postcarding {
    /// A cache of `cfg.postcard_cache_slots` entries (this worker's share) for `layout`,
    /// writing `redundancy` copies of each chunk.
    pub fn new(
        layout: PostcardLayout,
        hasher: PostcardHasher,
        redundancy: u8,
        cfg: &PrimitiveConfig,
    ) -> Result<Postcarding, String> {
        let hasher = hasher
            .with_cache_slots(cfg.postcard_cache_slots)
            .ok_or("postcard_cache_slots must be a power of two")?;
        let local = (cfg.postcard_cache_slots as usize).div_ceil(cfg.shard.workers.max(1));
        Ok(Postcarding {
            hasher,
            hops: layout.hops(),
            layout,
            redundancy: redundancy.clamp(1, MAX_REDUNDANCY as u8),
            flush_ns: cfg.postcard_flush_ns,
            workers: cfg.shard.workers.max(1),
            cache: vec![EMPTY; local],
            deadlines: VecDeque::with_capacity(local.min(1 << 16) + 1024),
        })
    }

    /// Copies written per chunk.
    pub fn redundancy(&self) -> u8 {
        self.redundancy
    }

    /// Writes `n` copies of every chunk from now on (a reconnection's metadata).
    pub fn set_redundancy(&mut self, n: u8) {
        self.redundancy = n.clamp(1, MAX_REDUNDANCY as u8);
    }

    /// Writes cache entry `idx` to its flow's chunk(s) and frees the entry: its postcards are
    /// `translated` if every copy was taken, else dropped.
    fn emit_chunk(
        &mut self,
        idx: usize,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        self.cache[idx].occupied = false;
        let e = &self.cache[idx];
        let h = &self.hasher;
        // Hops at or past the path length are blank whatever arrived for them.
        let present = if e.path_len != 0 {
            e.mask & ((1u32 << e.path_len) - 1) as u16
        } else {
            e.mask
        };
        let n = self.redundancy as usize;
        let d = h.digest(&e.flow, n);
        let mut chunk = [0u8; 64];
        for (hop, word) in chunk
            .chunks_exact_mut(4)
            .take(self.hops as usize)
            .enumerate()
        {
            let w = if present & (1 << hop) != 0 {
                h.encode_word(d.hop[hop], e.values[hop])
                    .unwrap_or_else(|| h.blank_word(d.hop[hop]))
            } else {
                h.blank_word(d.hop[hop])
            };
            word.copy_from_slice(&w);
        }
        let imm = e.immediate.then_some(d.chunk[0]);
        let reports = e.count as u64;
        let mut offsets = [0u64; MAX_REDUNDANCY];
        for (o, &chunk_idx) in offsets.iter_mut().zip(&d.chunk[..n]) {
            *o = self.layout.chunk_offset(chunk_idx);
        }
        out.write_replicas(now, tx, &offsets[..n], &chunk, imm, c)
            .account(reports, c);
    }
}

impl Postcarding {
    /// [`StorePrimitive::admit`] of a postcard of `hop` on a path of `path_len` hops.
    #[inline(always)]
    pub fn admit_hop(&self, hop: u8, path_len: u8) -> Result<u64, Refusal> {
        if hop >= self.hops || path_len > self.hops || (path_len != 0 && hop >= path_len) {
            return Err(Refusal::BadHop);
        }
        // Chunks are written when paths complete, not per report: no budget per postcard.
        Ok(0)
    }

    /// [`StorePrimitive::accept`] of an admitted postcard ([`Postcarding::admit_hop`];
    /// `immediate`: the report asked for an Immediate); `hint` is its cache index when the
    /// caller has it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn accept_hop(
        &mut self,
        now: u64,
        p: &PostcardFields,
        immediate: bool,
        hint: u32,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        let PostcardFields {
            flow,
            hop,
            path_len,
            value,
        } = p;
        // Worker w owns the cache indices h with h % workers == w, stored at h / workers,
        // which is below ceil(cache_slots / workers) = cache.len(). No division with one
        // worker.
        let h = if hint != NO_HINT {
            hint
        } else {
            self.hasher.cache_index(flow)
        } as usize;
        let idx = if self.workers == 1 {
            h
        } else {
            h / self.workers
        };
        let e = &self.cache[idx];
        if e.occupied && e.flow != *flow {
            // Another flow holds the slot: write the *old* flow's postcards to the *old*
            // flow's chunk before reusing the slot (the reference wrote them to the new
            // flow's chunk).
            self.emit_chunk(idx, now, out, tx, c);
            c.postcard_evictions += 1;
        }
        let e = &mut self.cache[idx];
        if !e.occupied {
            e.occupied = true;
            e.flow = *flow;
            e.mask = 0;
            e.count = 0;
            e.path_len = 0;
            e.immediate = false;
            e.gen = e.gen.wrapping_add(1);
            if self.flush_ns > 0 {
                self.deadlines
                    .push_back((now + self.flush_ns, idx as u32, e.gen));
            }
        }
        let bit = 1u16 << hop;
        if e.mask & bit != 0 {
            c.drop_postcard_duplicate_hop += 1;
        } else {
            e.mask |= bit;
            e.count += 1;
        }
        e.values[*hop as usize] = *value;
        e.immediate |= immediate;
        if *path_len != 0 {
            e.path_len = *path_len;
        }
        let want = if e.path_len != 0 {
            e.path_len
        } else {
            self.hops
        };
        if e.count >= want {
            self.emit_chunk(idx, now, out, tx, c);
            c.postcard_emits += 1;
        }
    }
}

impl StorePrimitive for Postcarding {
    #[inline]
    fn admit(&self, r: &Report, _: u8) -> Result<u64, Refusal> {
        let Primitive::Postcard { hop, path_len, .. } = &r.primitive else {
            return Err(Refusal::WrongStore);
        };
        self.admit_hop(*hop, *path_len)
    }

    #[inline]
    fn owner(&self, r: &Report, shard: Shard) -> (usize, u32) {
        match &r.primitive {
            Primitive::Postcard { flow, .. } => {
                let h = self.hasher.cache_index(flow);
                (h as usize % shard.workers, h)
            }
            _ => (shard.worker, NO_HINT),
        }
    }

    #[inline(always)]
    fn accept(
        &mut self,
        now: u64,
        r: &Report,
        hint: u32,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        if let Primitive::Postcard {
            flow,
            hop,
            path_len,
            value,
        } = r.primitive
        {
            let p = PostcardFields {
                flow,
                hop,
                path_len,
                value,
            };
            self.accept_hop(now, &p, r.header.immediate, hint, out, tx, c);
        }
    }

    fn poll(&mut self, now: u64, out: &mut QpSender, tx: &mut TxBatch, c: &mut TranslatorCounters) {
        let need = self.redundancy as usize;
        while let Some(&(deadline, idx, gen)) = self.deadlines.front() {
            if deadline > now || !out.can_take(now, need, tx) {
                return;
            }
            self.deadlines.pop_front();
            let e = &self.cache[idx as usize];
            if e.occupied && e.gen == gen {
                self.emit_chunk(idx as usize, now, out, tx, c);
                c.postcard_timeouts += 1;
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.deadlines.front().map(|&(d, _, _)| d)
    }

    fn pending(&self) -> u64 {
        self.cache
            .iter()
            .filter(|e| e.occupied)
            .map(|e| e.count as u64)
            .sum()
    }

    fn flush(
        &mut self,
        now: u64,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> bool {
        for i in 0..self.cache.len() {
            if !self.cache[i].occupied {
                continue;
            }
            if !out.can_take(now, self.redundancy as usize, tx) {
                return false;
            }
            self.emit_chunk(i, now, out, tx, c);
            c.postcard_timeouts += 1;
        }
        true
    }
}
