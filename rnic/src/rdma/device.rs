//! A device the real-RNIC backend uses: its protection domain, every store's region
//! registered in it, its limits and its `hw_counters`.
//!
//! Owns: registration (the one `unsafe` that hands a region's memory to the NIC). May not:
//! outlive the regions (the backend drops its devices before its stores).

use rdma_sys::*;

use super::verbs::{self, Mr, Pd};
use super::StoreSpec;
use crate::counters::RnicCounters;

/// A device the backend uses: a PD with every store's region registered in it.
pub(super) struct Device {
    pub(super) ctx: *mut ibv_context,
    pub(super) name: String,
    pub(super) port: u8,
    pub(super) limits: verbs::DeviceLimits,
    // Drop order: MRs, then the PD.
    pub(super) mrs: Vec<Mr>,
    pub(super) pd: Pd,
}

impl Device {
    pub(super) fn open(
        ctx: *mut ibv_context,
        port: u8,
        stores: &[StoreSpec],
    ) -> Result<Device, String> {
        let name = verbs::context_name(ctx);
        let limits =
            verbs::query_limits(ctx).map_err(|e| format!("ibv_query_device({name}): {e}"))?;
        let pd = Pd::new(ctx).map_err(|e| format!("ibv_alloc_pd({name}): {e}"))?;
        let mut mrs = Vec::with_capacity(stores.len());
        for s in stores {
            // SAFETY: the region is mapped for as long as its Arc lives; the backend holds the
            // Arc in `stores` and drops its devices (and so the MRs) first.
            let mr = unsafe {
                Mr::register(
                    &pd,
                    s.region.addr() as *mut u8,
                    s.region.len(),
                    // A ZERO agent's region is only read, never written by a peer.
                    if s.record.is_none() {
                        verbs::remote_read_only()
                    } else {
                        verbs::remote_access()
                    },
                )
            }
            .map_err(|e| {
                format!(
                    "ibv_reg_mr of store {:?} ({} bytes) on {name}: {e} (is `ulimit -l` large \
                     enough?)",
                    s.name,
                    s.region.len()
                )
            })?;
            log::info!(
                "rdma: store {:?} registered on {name}: addr {:#x} len {} rkey {:#x}",
                s.name,
                s.region.addr(),
                s.region.len(),
                mr.rkey()
            );
            mrs.push(mr);
        }
        Ok(Device {
            ctx,
            name,
            port,
            limits,
            mrs,
            pd,
        })
    }

    /// Sums the device's `hw_counters` that share a name with ours.
    pub(super) fn read_counters(&self, into: &mut RnicCounters) {
        let dir = format!(
            "/sys/class/infiniband/{}/ports/{}/hw_counters",
            self.name, self.port
        );
        let read = |n: &str| -> u64 {
            std::fs::read_to_string(format!("{dir}/{n}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        into.rcvd_pkts += read("rcvd_pkts");
        into.sent_pkts += read("sent_pkts");
        into.duplicate_request += read("duplicate_request");
        into.out_of_seq_request += read("out_of_seq_request");
        into.send_rnr_err += read("send_rnr_err");
    }
}
