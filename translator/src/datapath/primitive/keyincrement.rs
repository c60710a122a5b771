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
        self.add::<false>(now, r, out, tx, c);
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
        self.add::<true>(now, r, out, tx, c)
    }
}

impl KeyIncrement {
    /// Adds the admitted Key-Increment `r`'s delta to its N counters, and tells the
    /// collector's CPU when the report asks for it. `DIRECT`: within a direct budget
    /// ([`AcceptDirect`]). Returns the frames taken when `DIRECT`. (One body for both: the
    /// offsets stay where they were computed. Returned by value, they were copied through
    /// the stack: Key-Write's payload so copied cost 12 % of its wall clock.)
    #[inline(always)]
    fn add<const DIRECT: bool>(
        &mut self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> usize {
        let Primitive::KeyIncrement {
            redundancy,
            key,
            delta,
        } = &r.primitive
        else {
            return 0;
        };
        let n = *redundancy as usize;
        let mut slots = [0u32; MAX_REDUNDANCY];
        self.hasher.slots(key, n, &mut slots);
        let mut offsets = [0u64; MAX_REDUNDANCY];
        for (o, &slot) in offsets.iter_mut().zip(&slots[..n]) {
            *o = self.layout.slot_offset(slot);
        }
        let (mut sent, mut taken) = if DIRECT {
            out.fetch_add_replicas_direct(now, tx, &offsets[..n], *delta, c)
        } else {
            (out.fetch_add_replicas(now, tx, &offsets[..n], *delta, c), 0)
        };
        if r.header.immediate {
            // Within a direct budget too: `take` sends it straight away.
            let notified = self.notify(now, r, out, tx, c);
            taken += (DIRECT && notified.is_ok()) as usize;
            sent.note(notified);
        }
        sent.account(1, c);
        taken
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
