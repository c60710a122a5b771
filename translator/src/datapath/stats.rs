//! Per-worker translator counters.
//!
//! # Two units
//! Report counters (`rx_datagrams`, `reports_*`, `translated`, `drop_*`, the INT-derived
//! reports) count reports; frame counters (`frames*`, `frames_dropped_*`,
//! `frames_unconfirmed_at_reconnect`) count RoCEv2 frames. No counter mixes them: a report
//! whose frames were refused is one `drop_*`, however many frames it needed, and a frame that
//! carried many reports (an Append batch, a postcard chunk) is one frame.
//!
//! # The accounting identity
//! Every report received is, at any moment, exactly one of: `translated`, dropped under one
//! `drop_*` reason, or pending (an Append batch, a postcard cache entry, the high-priority
//! backlog; with several workers also a hand-off to its owner, counted `handoffs_out` by the
//! sender and translated, pending or dropped by the owner). For one worker:
//!
//! ```text
//! rx_datagrams + int_derived() == translated + dropped() + pending
//! ```
//!
//! summed over workers, `handoffs_out` adds to the right-hand side and hand-offs in flight to
//! the pending. When a report counts as `translated`, per primitive:
//! - Key-Write, Key-Increment: when its QP took every one of its frames (sent, or queued in
//!   the ring to be sent by `poll_transmit`);
//! - Append: when its batch's WRITE was taken (full, flush delay, shutdown); until then pending;
//! - Postcard: when its flow's chunk (every copy) was taken (path complete, eviction, age,
//!   shutdown); until then pending;
//! - Sketch-Merge: when its columns are merged into the epoch's sketch (a batch of merged
//!   columns is written, and written again when it changes, by the merge; a batch whose
//!   WRITE is refused stays to be written and counts in `frames_dropped_*`).
//!
//! A frame refused when a batch or chunk is written (no room in a ring-less QP's transmit
//! batch, a broken QP) makes its reports `drop_qp_queue_full` (or `drop_qp_broken`,
//! `drop_out_of_region`) and counts one `frames_dropped_*`. The property test
//! `tests/tests/counter_identity.rs` checks the identity after every burst on every path.

dta_proto::define_counters!(
    /// Counters of one translator worker.
    pub struct TranslatorCounters {
        /// Datagrams received on the report port.
        rx_datagrams,
        /// Key-Write reports parsed.
        reports_keywrite,
        /// Key-Increment reports parsed.
        reports_keyincrement,
        /// Append reports parsed.
        reports_append,
        /// Postcards parsed.
        reports_postcard,
        /// Sketch-Merge reports parsed.
        reports_sketch,
        /// Sketch columns merged (a report may carry several).
        sketch_columns_merged,
        /// Sketch columns skipped because a report overlapped columns already merged (the
        /// rest of the report was merged).
        sketch_columns_duplicate,
        /// Sketch-column NACKs sent for a report that skipped columns (a gap).
        sketch_gap_nacks,
        /// Sketch-column NACKs sent by the flush timer to switches that had not sent their
        /// whole sketch for the epoch.
        sketch_straggler_nacks,
        /// Sketch batches written because every column had the expected switches.
        sketch_batches_complete,
        /// Sketch batches written incomplete (flush timer, epoch roll-over, shutdown).
        sketch_batches_partial,
        /// Sketch epochs started.
        sketch_epochs,
        /// Sketch epochs the merge moved more than one ahead, by agreement of the switches.
        sketch_epoch_jumps,
        /// Sketch columns merged into the next epoch before the merge moved on to it (held).
        sketch_columns_held,
        /// Sketch switches whose epoch counter restarted (re-based onto the merge's epoch).
        sketch_switch_restarts,
        /// Sketch switches that left the table after `sketch.idle_epochs` silent epochs.
        sketch_switches_forgotten,
        /// Sketch-column NACKs not sent: the switch has no address on record (it is not
        /// configured and no report of it was ever merged).
        sketch_nacks_withheld,
        /// Reports whose data went out in RDMA frames their QP took (sent, or queued in its
        /// ring); Sketch-Merge reports when merged (see the module docs).
        translated,
        /// RoCEv2 frames emitted (all kinds).
        frames,
        /// RDMA WRITE with Immediate frames emitted.
        frames_imm,
        /// FETCH_ADD frames emitted.
        frames_atomic,
        /// Frames not built because their QP could not take them (no ring and no room in the
        /// transmit batch); their reports count as `drop_qp_queue_full` (a Sketch-Merge batch
        /// stays to be written again).
        frames_dropped_queue_full,
        /// Frames not built because their QP was broken; their reports count as
        /// `drop_qp_broken`.
        frames_dropped_qp_broken,
        /// Frames not built because they would have addressed bytes outside the store's
        /// region (never expected); their reports count as `drop_out_of_region`.
        frames_dropped_out_of_region,
        /// Append batches written full.
        append_batches,
        /// Append batches written partially because their flush delay expired (or at shutdown).
        append_partial_flushes,
        /// Postcard chunks emitted because the path was complete.
        postcard_emits,
        /// Postcard chunks emitted early because another flow took the cache slot.
        postcard_evictions,
        /// Postcard chunks emitted because their entry aged out (or at shutdown).
        postcard_timeouts,
        /// DTA NACKs sent to reporters.
        nacks_sent,
        /// DTA NACKs not sent: the transmit batch was full (the reporter learns of the gap
        /// from a later NACK or its own timeout).
        nacks_unsent,
        /// Sequence gaps detected across all reporters.
        reporter_gaps,
        /// Reports named missing in NACKs.
        reporter_missing,
        /// Reports that arrived behind their reporter's sequence (retransmissions, duplicates).
        reporter_late,
        /// High-priority reports queued because the message budget was exhausted.
        queued_high,
        /// Reports handed to the worker that owns their list or flow.
        handoffs_out,
        /// Dropped: datagram too short for its headers.
        drop_truncated,
        /// Dropped: a field held a forbidden value.
        drop_malformed,
        /// Dropped: unknown opcode.
        drop_unknown_opcode,
        /// Dropped: unsupported extended-profile version or profile not accepted.
        drop_bad_version,
        /// Dropped: redundancy 0 or above the configured maximum.
        drop_bad_redundancy,
        /// Dropped: a Key-Write or Key-Increment report whose redundancy N differs from the
        /// N its store is written with (the store's metadata records it; queries read it).
        drop_redundancy_mismatch,
        /// Dropped: no store serves this primitive (or this destination / key).
        drop_no_store,
        /// Dropped: Append list ID not served by any store.
        drop_unknown_list,
        /// Dropped: value longer than the store's slot or entry.
        drop_value_too_long,
        /// Dropped: postcard hop or path length outside the store's hop bound.
        drop_bad_hop,
        /// Dropped: postcard repeated a hop already cached for its flow (the newer value wins).
        drop_postcard_duplicate_hop,
        /// Dropped: low priority, message budget exhausted.
        drop_overload_low,
        /// Dropped: medium priority, message budget exhausted.
        drop_overload_medium,
        /// Dropped: high priority, backlog full.
        drop_backlog_full,
        /// Dropped: the store's queue pair is broken (awaiting reconnection).
        drop_qp_broken,
        /// Dropped: the store's queue pair could not take the report's frames: its ring holds
        /// as many frames not yet sent as it can keep (a stalled collector, a window closed by
        /// loss, an RNR pause), it has `max_outstanding_psns` PSNs unconfirmed (a silent
        /// collector), or it has no ring and the transmit batch has no room.
        drop_qp_queue_full,
        /// Dropped: a frame would have addressed bytes outside the store's region (never
        /// expected: store geometry is validated when the pipeline is built).
        drop_out_of_region,
        /// Dropped: hand-off ring to the owning worker full.
        drop_handoff_full,
        /// Dropped: a sketch report named a sketch ID no store serves.
        drop_sketch_unknown,
        /// Dropped: a sketch report's rows, cell width or merge op differ from its store's.
        drop_sketch_geometry,
        /// Dropped: a sketch report's columns run beyond the sketch.
        drop_sketch_column_range,
        /// Dropped (and NACKed): a sketch report started beyond the column its switch owes.
        drop_sketch_gap,
        /// Dropped: a sketch report's columns were all merged already.
        drop_sketch_duplicate,
        /// Dropped: a sketch report of an epoch older than the one being merged (late, or
        /// replayed).
        drop_sketch_late,
        /// Dropped: a sketch report from a new switch when `sketch.max_switches` are tracked.
        drop_sketch_switches_full,
        /// Dropped: a sketch report more than one epoch ahead of the merge (it counts as the
        /// switch's vote for that epoch; the merge jumps only when enough switches agree).
        drop_sketch_epoch_ahead,
        /// RoCEv2 frames still unconfirmed when a reconnection replaced their QP: the old QP
        /// may or may not have delivered them, and they are not resent on the new one.
        frames_unconfirmed_at_reconnect,
        /// RoCEv2 responses received (ACK, NAK, atomic ACK).
        roce_rx,
        /// RoCEv2 responses that were malformed or named an unknown QP.
        roce_rx_invalid,
        /// Datagrams received on the INT Telemetry Report port.
        int_rx_datagrams,
        /// Telemetry Report v1.0 reports read.
        int_reports_v1,
        /// Telemetry Report v2.0 individual reports read.
        int_reports_v2,
        /// INT not read: shorter than a header or than a length field claims.
        int_drop_truncated,
        /// INT not read: version other than 1 and 2.
        int_drop_bad_version,
        /// INT not read: a length field inconsistent with the bitmaps or other lengths.
        int_drop_bad_length,
        /// INT not read: RepType other than inner-only and INT (IOAM, reserved).
        int_drop_unknown_rep_type,
        /// INT not mapped: no IPv4 flow in the inner contents (none, IPv6, DS data, ...).
        int_drop_unsupported_inner_type,
        /// INT not mapped: malformed inner headers (IP, TCP, INT shim or metadata header).
        int_drop_malformed_inner,
        /// INT reports that matched no configured mapping.
        int_unmapped,
        /// INT path values cut to the longest value a report carries (8 hops).
        int_path_truncated,
        /// INT postcards not derived: the report's TTL was above `[int.postcard] initial_ttl`
        /// (the hop is unknown; the report's other rules still applied).
        int_postcard_ttl_above_initial,
        /// Key-Write reports derived from INT reports (paths).
        int_derived_keywrite,
        /// Key-Increment reports derived from INT reports (per-flow counters).
        int_derived_keyincrement,
        /// Append reports derived from INT reports (drop and congestion events).
        int_derived_append,
        /// Postcards derived from INT reports (INT-XD / INT-MX per-hop reports).
        int_derived_postcard,
        /// Sequence gaps seen per (node ID, hw_id): telemetry reports lost on the way.
        int_seq_gaps,
        /// Telemetry reports missing in those gaps.
        int_seq_missing,
        /// Telemetry reports behind their source's sequence (reordered or duplicated).
        int_seq_late,
    }
);

impl TranslatorCounters {
    /// Sum of all `drop_*` counters (read per burst by harnesses and per snapshot by workers,
    /// so the fields are summed directly; a test checks the list against the counter names).
    #[inline]
    pub fn dropped(&self) -> u64 {
        self.drop_truncated
            + self.drop_malformed
            + self.drop_unknown_opcode
            + self.drop_bad_version
            + self.drop_bad_redundancy
            + self.drop_redundancy_mismatch
            + self.drop_no_store
            + self.drop_unknown_list
            + self.drop_value_too_long
            + self.drop_bad_hop
            + self.drop_postcard_duplicate_hop
            + self.drop_overload_low
            + self.drop_overload_medium
            + self.drop_backlog_full
            + self.drop_qp_broken
            + self.drop_qp_queue_full
            + self.drop_out_of_region
            + self.drop_handoff_full
            + self.drop_sketch_unknown
            + self.drop_sketch_geometry
            + self.drop_sketch_column_range
            + self.drop_sketch_gap
            + self.drop_sketch_duplicate
            + self.drop_sketch_late
            + self.drop_sketch_switches_full
            + self.drop_sketch_epoch_ahead
    }

    /// DTA reports derived from INT Telemetry Reports (each then translated, dropped under a
    /// `drop_*` reason or pending, like a received report: `rx_datagrams + int_derived() ==
    /// translated + dropped() + pending`).
    #[inline]
    pub fn int_derived(&self) -> u64 {
        self.int_derived_keywrite
            + self.int_derived_keyincrement
            + self.int_derived_append
            + self.int_derived_postcard
    }

    /// Individual Telemetry Reports that could not be read or mapped, all reasons.
    pub fn int_dropped(&self) -> u64 {
        self.int_drop_truncated
            + self.int_drop_bad_version
            + self.int_drop_bad_length
            + self.int_drop_unknown_rep_type
            + self.int_drop_unsupported_inner_type
            + self.int_drop_malformed_inner
    }

    /// Reports received (all primitives) that parsed.
    pub fn reports(&self) -> u64 {
        self.reports_keywrite
            + self.reports_keyincrement
            + self.reports_append
            + self.reports_postcard
            + self.reports_sketch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_sums_every_drop_counter() {
        let c = TranslatorCounters {
            drop_truncated: 1,
            drop_malformed: 1 << 1,
            drop_unknown_opcode: 1 << 2,
            drop_bad_version: 1 << 3,
            drop_bad_redundancy: 1 << 4,
            drop_no_store: 1 << 5,
            drop_unknown_list: 1 << 6,
            drop_value_too_long: 1 << 7,
            drop_bad_hop: 1 << 8,
            drop_postcard_duplicate_hop: 1 << 9,
            drop_overload_low: 1 << 10,
            drop_overload_medium: 1 << 11,
            drop_backlog_full: 1 << 12,
            drop_qp_broken: 1 << 13,
            drop_qp_queue_full: 1 << 14,
            drop_out_of_region: 1 << 15,
            drop_handoff_full: 1 << 16,
            drop_redundancy_mismatch: 1 << 17,
            drop_sketch_unknown: 1 << 18,
            drop_sketch_geometry: 1 << 19,
            drop_sketch_column_range: 1 << 20,
            drop_sketch_gap: 1 << 21,
            drop_sketch_duplicate: 1 << 22,
            drop_sketch_late: 1 << 23,
            drop_sketch_switches_full: 1 << 24,
            drop_sketch_epoch_ahead: 1 << 25,
            translated: 1 << 30,
            rx_datagrams: 1 << 31,
            ..TranslatorCounters::default()
        };
        let drops: Vec<u64> = c
            .iter()
            .filter(|(i, _)| i.name.starts_with("drop_"))
            .map(|(_, v)| v)
            .collect();
        // A new drop_* counter must be added to `dropped` (and here).
        assert_eq!(drops.len(), 26, "drop counters changed");
        assert_eq!(c.dropped(), drops.iter().sum::<u64>());
        assert_eq!(c.dropped(), (1 << 26) - 1);
    }
}
