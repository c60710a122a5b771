//! Demultiplexing for the hot path: which handler a received datagram goes to
//! ([`PortDemux`]: reports, INT reports, RoCEv2 answers or an RDMA_CM initiator, in runs), and
//! a fast, non-cryptographic hasher for the small keys the datapath looks up per packet (a
//! QPN, a reporter's address).
//!
//! [`PortDemux`] is sans-I/O: the worker (`crate::driver`) owns the sockets and hands it each
//! received burst; it decides nothing but where each run of datagrams goes, and calls no
//! handler itself, so the worker keeps its borrows of the pipeline and the initiators apart.
//!
//! The keys come from the network, so a hostile sender can choose them; the maps that use
//! this hasher are bounded (pre-sized, never grown past their limit), so collisions can cost
//! probe length but never memory. Every bit of the key reaches the low bits the table indexes
//! by (a test checks addresses that differ only in their high bits spread out).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use dta_proto::batch::Datagram;

/// Where a run of received datagrams goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// DTA reports (to the report port).
    Reports,
    /// P4.org Telemetry Reports (to the INT port).
    IntReports,
    /// RoCEv2 answers (ACKs, NAKs) for the pipeline's QPs.
    Responses,
    /// One RDMA_CM message (QP 1), for the initiator with this index.
    Cm(usize),
}

/// Splits received bursts by destination port: reports, INT reports, and everything else as
/// RoCEv2, where the datagrams an RDMA_CM initiator claims go to it one at a time and the rest
/// to the pipeline in runs (one call per run of datagrams, not per datagram).
#[derive(Debug, Clone, Copy)]
pub struct PortDemux {
    report_port: u16,
    /// 0: no INT port.
    int_port: u16,
}

impl PortDemux {
    /// Datagrams to `report_port` are DTA reports, to `int_port` (0: none) INT reports.
    pub fn new(report_port: u16, int_port: u16) -> PortDemux {
        PortDemux {
            report_port,
            int_port,
        }
    }

    /// The runs of `burst`, in order ([`Runs::next_run`]).
    #[inline]
    pub fn runs<'b, 'd>(&self, burst: &'b [Datagram<'d>]) -> Runs<'b, 'd> {
        Runs {
            demux: *self,
            burst,
            pos: 0,
            end: 0,
        }
    }
}

/// A cursor over one burst's runs ([`PortDemux::runs`]).
pub struct Runs<'b, 'd> {
    demux: PortDemux,
    burst: &'b [Datagram<'d>],
    /// The next datagram to hand out.
    pos: usize,
    /// The end of the RoCEv2 run `pos` is in (`pos == end`: between runs).
    end: usize,
}

impl<'b, 'd> Runs<'b, 'd> {
    /// The next run: a maximal run of reports or of INT reports; within a run of RoCEv2
    /// datagrams, one datagram `claim` gives to an RDMA_CM initiator (its index), or a maximal
    /// run of datagrams it claims for none. `None` at the end of the burst.
    #[inline]
    pub fn next_run(
        &mut self,
        mut claim: impl FnMut(&Datagram<'d>) -> Option<usize>,
    ) -> Option<(Inbound, &'b [Datagram<'d>])> {
        let b = self.burst;
        if self.pos >= self.end {
            let i = self.pos;
            if i >= b.len() {
                return None;
            }
            let (report_port, int_port) = (self.demux.report_port, self.demux.int_port);
            let is_report = b[i].dst.port() == report_port;
            let is_int = int_port != 0 && b[i].dst.port() == int_port;
            let mut j = i + 1;
            while j < b.len()
                && (b[j].dst.port() == report_port) == is_report
                && (int_port != 0 && b[j].dst.port() == int_port) == is_int
            {
                j += 1;
            }
            self.end = j;
            if is_report || is_int {
                self.pos = j;
                let kind = if is_report {
                    Inbound::Reports
                } else {
                    Inbound::IntReports
                };
                return Some((kind, &b[i..j]));
            }
        }
        let k = self.pos;
        if let Some(ci) = claim(&b[k]) {
            self.pos = k + 1;
            return Some((Inbound::Cm(ci), &b[k..k + 1]));
        }
        let mut e = k + 1;
        while e < self.end && claim(&b[e]).is_none() {
            e += 1;
        }
        self.pos = e;
        Some((Inbound::Responses, &b[k..e]))
    }
}

/// A multiply-rotate hasher (the FxHash construction) over `u64` words.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits depending only on the key's low bits (a reporter's
        // port is the same for all its addresses), and the table indexes by the low bits: fold
        // the high half in (the splitmix64 finalizer).
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(K);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// [`FastHasher`]'s hash of one `u64` (for a table of its own, indexed by the low bits).
#[inline(always)]
pub fn hash_u64(key: u64) -> u64 {
    let mut h = FastHasher::default();
    h.write_u64(key);
    h.finish()
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// An empty map with room for `n` entries (no allocation until it holds more).
pub fn fast_map<K, V>(n: usize) -> FastMap<K, V> {
    FastMap::with_capacity_and_hasher(n, BuildHasherDefault::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};

    #[test]
    fn keys_differing_in_high_bits_spread_over_the_low_bits() {
        let b = BuildHasherDefault::<FastHasher>::default();
        // 10,000 reporters on one port: (address << 16) | port.
        let mut buckets = std::collections::HashSet::new();
        for i in 0..10_000u64 {
            let key = (0x0a00_0000 + i) << 16 | 40041;
            buckets.insert(b.hash_one(key) & 0x3fff);
        }
        // 16,384 buckets: a uniform hash fills about 7,600 of them.
        assert!(buckets.len() > 7_000, "{} buckets", buckets.len());
    }

    #[test]
    fn bursts_split_into_runs_by_port_and_cm_claims() {
        use std::net::{Ipv4Addr, SocketAddrV4};
        let d = |port: u16| Datagram {
            src: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
            ip: None,
            payload: &[],
        };
        // Reports on 40040, INT on 40050, RoCEv2 on 4791; a CM message is marked by source
        // port 1 here.
        let mut cm = d(4791);
        cm.src.set_port(1);
        let burst = [
            d(40040),
            d(40040),
            d(4791),
            cm,
            d(4791),
            d(4791),
            d(40050),
            d(40040),
            cm,
        ];
        let demux = PortDemux::new(40040, 40050);
        let mut runs = demux.runs(&burst);
        let mut got = Vec::new();
        while let Some((kind, run)) = runs.next_run(|x| (x.src.port() == 1).then_some(7)) {
            got.push((kind, run.len()));
        }
        use Inbound::*;
        assert_eq!(
            got,
            [
                (Reports, 2),
                (Responses, 1),
                (Cm(7), 1),
                (Responses, 2),
                (IntReports, 1),
                (Reports, 1),
                (Cm(7), 1),
            ]
        );
        // Without an INT port, its datagrams are RoCEv2.
        let mut runs = PortDemux::new(40040, 0).runs(&burst[5..8]);
        let mut next = || runs.next_run(|_| None).map(|(k, r)| (k, r.len()));
        assert_eq!(next(), Some((Responses, 2)));
        assert_eq!(next(), Some((Reports, 1)));
        assert_eq!(next(), None);
    }
}
