//! Key-Write: a value under a key, written to N slots chosen by N independent hashes, each slot
//! holding the key's checksum and the value (the collector answers by a plurality vote).

use dta_proto::batch::TxBatch;
use dta_proto::hash::{KeyHasher, MAX_REDUNDANCY};
use dta_proto::layout::KeyWriteLayout;
use dta_proto::meta::Redundancy;
use dta_proto::wire::report::{Primitive, Report};
use dta_proto::wire::roce::PADDED_PAYLOAD;

use super::{AcceptDirect, Refusal, StorePrimitive};
use crate::datapath::sender::QpSender;
use crate::datapath::stats::TranslatorCounters;

/// A Key-Write store's translation state (stateless beyond its geometry).
pub struct KeyWrite {
    layout: KeyWriteLayout,
    hasher: KeyHasher,
    /// The N the store is written with; `None`: any N up to the maximum.
    redundancy: Option<Redundancy>,
}

impl KeyWrite {
    /// Key-Write into `layout`, hashed by `hasher`.
    /// Reports must carry `redundancy` when the store records one.
    pub fn new(
        layout: KeyWriteLayout,
        hasher: KeyHasher,
        redundancy: Option<Redundancy>,
    ) -> KeyWrite {
        KeyWrite {
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

impl StorePrimitive for KeyWrite {
    #[inline]
    fn admit(&self, r: &Report, max_redundancy: u8) -> Result<u64, Refusal> {
        let Primitive::KeyWrite {
            redundancy, value, ..
        } = &r.primitive
        else {
            return Err(Refusal::WrongStore);
        };
        if *redundancy == 0 || *redundancy > max_redundancy {
            return Err(Refusal::BadRedundancy);
        }
        if self.redundancy.is_some_and(|n| n.get() != *redundancy) {
            return Err(Refusal::RedundancyMismatch);
        }
        if value.len() > self.layout.value_width() {
            return Err(Refusal::ValueTooLong);
        }
        Ok(*redundancy as u64)
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
        self.write::<false>(now, r, out, tx, c);
    }
}

impl AcceptDirect for KeyWrite {
    #[inline(always)]
    fn accept_direct(
        &mut self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> usize {
        self.write::<true>(now, r, out, tx, c)
    }
}

impl KeyWrite {
    /// Writes the admitted Key-Write `r`: its slot (the key's checksum and the value, padded)
    /// at N offsets, the first with the checksum as Immediate when the report asks for one.
    /// `DIRECT`: within a direct budget ([`AcceptDirect`]). Returns the frames taken when
    /// `DIRECT`. (One body for both: the payload stays where it was encoded. Returned by
    /// value from a helper, it was copied through the stack, its 32-byte loads waiting on
    /// the small stores that encoded it: 12 % of Key-Write's wall clock.)
    #[inline(always)]
    fn write<const DIRECT: bool>(
        &mut self,
        now: u64,
        r: &Report,
        out: &mut QpSender,
        tx: &mut TxBatch,
        c: &mut TranslatorCounters,
    ) -> usize {
        let Primitive::KeyWrite {
            redundancy,
            key,
            value,
        } = &r.primitive
        else {
            return 0;
        };
        let n = *redundancy as usize;
        let mut slots = [0u32; MAX_REDUNDANCY];
        let checksum = self.hasher.checksum_and_slots(key, n, &mut slots);
        let mut payload = [0u8; PADDED_PAYLOAD];
        self.layout
            .encode_slot_padded(checksum, value, &mut payload);
        let mut offsets = [0u64; MAX_REDUNDANCY];
        for (o, &slot) in offsets.iter_mut().zip(&slots[..n]) {
            *o = self.layout.slot_offset(slot);
        }
        let imm = r.header.immediate.then_some(checksum);
        if DIRECT {
            let (sent, taken) = out.write_replicas_direct(now, tx, &offsets[..n], &payload, imm, c);
            sent.account(1, c);
            taken
        } else {
            out.write_replicas(now, tx, &offsets[..n], &payload, imm, c)
                .account(1, c);
            0
        }
    }
}
