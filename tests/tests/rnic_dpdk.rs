//! The collector's software RNIC over DPDK (`[rnic] backend = "dpdk"`, a net_af_packet port
//! on veth B), end to end with a kernel-UDP translator over RDMA_CM (see `rnic_raw/mod.rs`).
//!
//! Needs root and the `dpdk` feature (`tests/tests/backend_features.rs` builds and runs it);
//! prints `SKIP: reason` and passes otherwise. Its own test binary: the EAL starts once per
//! process.

mod rnic_raw;

use dta_collector::config::RnicBackend;

/// Removes the EAL's runtime directory (left without --in-memory, which --no-huge excludes),
/// also when the test fails.
struct RuntimeDir(String);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.0));
    }
}

#[test]
fn translator_writes_through_rdma_cm_into_a_software_rnic_on_dpdk() {
    let prefix = format!("dta-rnic-{}", std::process::id());
    let _cleanup = RuntimeDir(prefix.clone());
    let p2 = prefix.clone();
    rnic_raw::run("DPDK", "dtk", &["EAL", "rte_eal_init"], move |if_b| {
        rnic_raw::collector_config(|io| {
            io.backend = RnicBackend::Dpdk;
            io.dpdk.eal_args = [
                "-l",
                "0",
                "--no-pci",
                "--no-huge",
                "-m",
                "256",
                "--log-level=lib.eal:error",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([
                format!("--file-prefix={p2}"),
                format!("--vdev=net_af_packet0,iface={if_b},framecnt=4096"),
            ])
            .collect();
            io.dpdk.ports = vec!["net_af_packet0".into()];
        })
    });
}
