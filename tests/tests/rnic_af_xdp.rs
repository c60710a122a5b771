//! The collector's software RNIC over AF_XDP (`[rnic] backend = "af_xdp"`, native XDP on
//! veth B), end to end with a kernel-UDP translator over RDMA_CM (see `rnic_raw/mod.rs`).
//!
//! Needs root and the `af_xdp` feature (`tests/tests/backend_features.rs` builds and runs it);
//! prints `SKIP: reason` and passes otherwise.

mod rnic_raw;

use dta_collector::config::RnicBackend;
use dta_io::config::XdpAttach;

#[test]
fn translator_writes_through_rdma_cm_into_a_software_rnic_on_af_xdp() {
    rnic_raw::run(
        "AF_XDP",
        "dtc",
        &["EPERM", "Operation not permitted"],
        |if_b| {
            rnic_raw::collector_config(|io| {
                io.backend = RnicBackend::AfXdp;
                io.af_xdp.interface = if_b.into();
                io.af_xdp.mode = XdpAttach::Native;
            })
        },
    );
}
