//! `dta gen --traffic`: bring your own traffic. A packet capture of ordinary traffic, laid over a
//! topology, becomes the DTA reports the switches on that topology would send for it, with the
//! ground truth beside them; `dta replay` then measures the result like any other trace and
//! checks every store against the truth ([`check`]).
//!
//! Data flows [`capture`] (pcap or pcapng; Ethernet with 802.1Q/802.1ad tags, Linux cooked v1
//! and v2, raw IP, loopback; IPv4 and IPv6; TCP, UDP, ICMP and the rest) → [`decode`] (one
//! record → one IP packet, or a counted reason to skip it: not IP, fragment, truncated,
//! malformed; packets from a host to itself never cross a switch and are counted apart) →
//! [`topology`] (the path of each flow, hop by hop, as shortest-path ECMP routes it) →
//! [`convert`] (the reports) → a [`Trace`](crate::trace::Trace) with a send time per report.
//!
//! # The model
//! A *flow* is one direction of a 5-tuple (source and destination address, protocol, ports;
//! ports are 0 for protocols without them). Its 13-byte key is what `dta gen` uses: addresses,
//! protocol, ports, big-endian; DTA keys are at most 16 bytes, so an IPv6 address is folded to
//! 32 bits (`gen::digest` of its 16 bytes), and the ground truth keeps the full addresses. A
//! packet's size is its IP length (header and payload), whatever the capture's link type.
//! Report times follow the capture's timestamps divided by `--speed` (from the first packet),
//! and the reports of one packet are sent at its time, in the order below.
//!
//! - **INT path** (Key-Write): the first packet of a flow makes its last hop (the INT sink)
//!   report the flow's path, key = 5-tuple, value = the switch IDs hop by hop (4 bytes each,
//!   at most [`topology::MAX_PATH`]), redundancy N.
//! - **Postcards** (Postcarding): every `--postcard-every`-th packet of a flow (default every
//!   packet) makes each switch on the path send its postcard: hop index, path length, its ID.
//! - **Congestion** (Append, 8-byte entries: switch ID, queue depth in bytes, list
//!   `L + ID mod L`): every egress port (a switch and its next hop, or the host it delivers
//!   to) is a FIFO queue draining at `--link-gbps`. A packet joins its first hop's queue at
//!   its capture time and each next hop's when the queue before has sent it (tandem queues,
//!   no propagation delay), so downstream queues build only where flows meet. When a packet
//!   joins a queue and makes it deeper than `--queue-threshold` bytes, the switch reports it
//!   once per episode; the episode ends when the queue has drained below half the threshold (the
//!   hysteresis of a queue-report trigger). The capture is one vantage point: the queues are
//!   an estimate of what its traffic alone would do to the topology. Events are sent at the
//!   packet's capture time.
//! - **Loss** (Append, 18-byte NetSeer-style entries: 5-tuple, reason
//!   [`convert::LOSS_REASON_RETRANSMISSION`], TCP sequence number, list `ID mod L`): a TCP
//!   segment whose first sequence number was already seen in its direction ([`tcp`]) means an
//!   earlier copy was lost; the switch on the path with the deepest queue at that moment
//!   reports it.
//! - **Flow counters** (Key-Increment): at the end of each epoch (`--epoch`, counted from the
//!   first packet) every flow active in it has its first hop add the epoch's packets to key
//!   `5-tuple ‖ 'P'` and its bytes to `5-tuple ‖ 'B'`, so the store holds each flow's totals.
//! - **Sketches** (Sketch-Merge): at the end of each epoch every switch of the
//!   topology sends its Count-Min of packets per flow (sketch ID 1, every flow crossing it) and
//!   its HyperLogLog of flows (ID 2), column by column; the translator merges them into the
//!   network-wide sketches (`flow-sizes` and `flows` stores). Switches export on a timer, so
//!   an epoch without a packet anywhere (between the first and the last packet) still sends
//!   every switch's empty sketches: the merge steps one epoch at a time, as behind a real
//!   fleet, instead of jumping (a jump needs a quorum of votes, and the voting reports are
//!   dropped).
//!
//! The ground truth ([`convert::TrafficTruth`], in `FILE.json` next to the pcap, beside the
//! scenario `dta replay` reads) lists every flow (addresses, ports, packets, bytes, path,
//! retransmissions), every loss and congestion event with the frame that caused it, and every
//! epoch's active flows and their packets.

pub mod capture;
pub mod check;
pub mod convert;
pub mod decode;
pub mod tcp;
pub mod topology;

use std::path::Path;

use dta_proto::wire::report::ReportFormat;

pub use convert::{convert, Converted, ReportCounts, TrafficFile, TrafficOptions, TrafficTruth};

use crate::gen::{Scenario, SketchStores};
use capture::Capture;
use topology::Topology;

/// Parses a duration: a number with a unit (`ns`, `us`, `ms`, `s`), e.g. `100ms`, `2.5s`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("{s:?}: give a unit (ns, us, ms, s)"))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {num:?} is not a number"))?;
    let mul = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ns, us, ms, s)")),
    };
    let ns = v * mul;
    if !(ns.is_finite() && ns >= 1.0 && ns < u64::MAX as f64) {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(ns as u64)
}

/// A converted capture: the reports, their send times, and what `FILE.json` holds.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// The reports.
    pub trace: crate::trace::Trace,
    /// Report `i` is sent at `times_ns[i]`.
    pub times_ns: Vec<u64>,
    /// The scenario (stores sized for the topology) and the ground truth.
    pub file: TrafficFile,
}

/// Reads `capture`, lays it over `topology` (`fat-tree:k=K` or a file; fat-tree switch IDs
/// come from `sc`), and converts it with the Sketch-Merge geometry of `sketch`.
pub fn from_capture(
    capture: &Path,
    topology: &str,
    sc: &Scenario,
    sketch: SketchStores,
    o: &TrafficOptions,
) -> Result<Traffic, String> {
    if sc.profile != ReportFormat::Extended || sc.telemetry != 0 {
        return Err(
            "--traffic writes DTA reports in the extended profile (13-byte flow keys): leave \
             --profile and --telemetry at their defaults"
                .into(),
        );
    }
    o.validate()?;
    let mut topo = Topology::from_arg(topology, |i| sc.switch_id(i))?;
    let mut seen = std::collections::HashSet::new();
    for &id in topo.ids() {
        if id == 0 || id == u32::MAX {
            return Err(format!(
                "{}: switch ID {id} is reserved (IDs are 1..=4294967294; see --id-base)",
                topo.name
            ));
        }
        if !seen.insert(id) {
            return Err(format!(
                "{}: switch ID {id} is given twice (--switch-ids needs one ID per switch)",
                topo.name
            ));
        }
    }
    let cap = Capture::open(capture)?;
    let mut sc = sc.clone();
    sc.k = topo.fat_tree_k.unwrap_or(sc.k);
    sc.switch_ids = topo.ids().to_vec();
    sc.postcard_hops = topo.max_path() as u8;
    sc.sketch = Some(SketchStores {
        switches: topo.switches() as u32,
        ..sketch
    });
    sc.validate()?;
    let conv = convert(
        &sc,
        &mut topo,
        &cap.packets,
        &cap.stats,
        &capture.display().to_string(),
        o,
    )?;
    Ok(Traffic {
        trace: conv.trace,
        times_ns: conv.times_ns,
        file: TrafficFile {
            scenario: sc,
            traffic: conv.truth,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("100ms"), Ok(100_000_000));
        assert_eq!(parse_duration_ns("2.5s"), Ok(2_500_000_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("7ns"), Ok(7));
        for bad in ["", "10", "ms", "1h", "-1s", "0s", "1e30s", "x1s"] {
            assert!(parse_duration_ns(bad).is_err(), "{bad}");
        }
    }
}
