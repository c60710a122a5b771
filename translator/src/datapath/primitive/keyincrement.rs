//! Key-Increment: a delta added to N counters chosen by N independent hashes of the key, with
//! RDMA FETCH_ADD (the collector answers with the minimum of the N counters).

use dta_proto::batch::TxBatch;
use dta_proto::hash::{KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::CounterLayout;
use dta_proto::meta::Redundancy;
use dta_proto::wire::report::{Primitive, Report};

use super::{AcceptDirect, Refusal, StorePrimitive};
use crate::datapath::sender::{FrameRefusal, QpSender};
use crate::datapath::stats::TranslatorCounters;

/// A Key-Increment store's translation state (stateless beyond its geometry).
pub struct KeyIncrement {
    layout: CounterLayout,
    hasher: KeyHasher,
    /// The N the store is written with; `None`: any N up to the maximum.
    redundancy: Option<Redundancy>,
}

impl KeyIncrement {
    /// Key-Increment into `layout`, hashed by `hasher`.
    /// Reports must carry `redundancy` when the store records one.
    pub fn new(
        layout: CounterLayout,
        hasher: KeyHasher,
        redundancy: Option<Redundancy>,
    ) -> KeyIncrement {
        KeyIncrement {
            layout,
            hasher,
            redundancy,
        }
    }

    /// The N the store is written with, if it records one.
    pub fn redundancy(&self) -> Option<Redundancy> {
        self.redundancy
    }

    /// Takes the N a reconnection's metadata records.
    pub fn set_redundancy(&mut self, n: Option<Redundancy>) {
        self.redundancy = n;
    }
}

impl StorePrimitive for KeyIncrement {
    #[inline]
    fn admit(&self, r: &Report, max_redundancy: u8) -> Result<u64, Refusal> {
        let Primitive::KeyIncrement { redundancy, .. } = &r.primitive else {
            return Err(Refusal::WrongStore);
        };
        if *redundancy == 0 || *redundancy > max_redundancy {
            return Err(Refusal::BadRedundancy);
        }
        if self.redundancy.is_some_and(|n| n.get() != *redundancy) {
            return Err(Refusal::RedundancyMismatch);
        }
        Ok(*redundancy as u64 + r.header.immediate as u64)
    }

    #[inline(always)]
    fn accept(
        &mut self,
        now: u64,
        r: &Report,
        _hint: u32,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) {
        let Some((n, offsets, delta)) = self.replicas(r) else {
            return;
        };
        let mut sent = out.fetch_add_replicas(now, tx, &offsets[..n], delta, c);
        if r.header.immediate {
            sent.note(self.notify(now, r, out, tx, c));
        }
        sent.account(1, c);
    }
}

impl AcceptDirect for KeyIncrement {
    #[inline(always)]
    fn accept_direct(
        &mut self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> usize {
        let Some((n, offsets, delta)) = self.replicas(r) else {
            return 0;
        };
        let (mut sent, mut taken) = out.fetch_add_replicas_direct(now, tx, &offsets[..n], delta, c);
        if r.header.immediate {
            // Within the budget too: `take` sends it straight away.
            let notified = self.notify(now, r, out, tx, c);
            taken += notified.is_ok() as usize;
            sent.note(notified);
        }
        sent.account(1, c);
        taken
    }
}

impl KeyIncrement {
    /// The admitted Key-Increment `r`'s replicas: how many, their offsets and the delta
    /// (`None` for another primitive).
    #[inline(always)]
    fn replicas(&self, r: &Report) -> Option<(usize, [u64; MAX_REDUNDANCY], u64)> {
        let Primitive::KeyIncrement {
            redundancy,
            key,
            delta,
        } = &r.primitive
        else {
            return None;
        };
        let n = *redundancy as usize;
        let mut slots = [0u32; MAX_REDUNDANCY];
        self.hasher.slots(key, n, &mut slots);
        let mut offsets = [0u64; MAX_REDUNDANCY];
        for (o, &slot) in offsets.iter_mut().zip(&slots[..n]) {
            *o = self.layout.slot_offset(slot);
        }
        Some((n, offsets, *delta))
    }

    /// A zero-length WRITE with Immediate: tells the collector's CPU which key of `r`
    /// changed.
    #[cold]
    fn notify(
        &self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> Result<(), FrameRefusal> {
        let Primitive::KeyIncrement { key, .. } = &r.primitive else {
            return Ok(());
        };
        out.write_imm(now, tx, 0, &[], self.hasher.checksum(key), c)
    }
}
