//! `dta-dpdk-sys`: minimal raw bindings to DPDK 22.11 (Debian `libdpdk-dev`).
//!
//! bindgen generates declarations for the EAL, ethdev and mempool functions and types `dta-io`
//! uses; DPDK's static-inline fast path (`rte_eth_rx_burst`/`tx_burst`, `rte_pktmbuf_alloc`,
//! `free`, `append`, `mtod`, `rte_errno`) is reached through the `dta_*` wrappers of a small C
//! shim compiled by `cc`. Poll-mode drivers (net_af_packet, net_af_xdp, net_pcap, net_ring, ...)
//! are shared objects the EAL loads from its plugin directory; `--vdev=...` EAL arguments
//! create virtual ports. Everything here is `unsafe` FFI; the safe wrapper is
//! `dta_io::dpdk`.
//!
//! Without the `link` feature the crate is empty, so a workspace build needs no DPDK.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]

#[cfg(feature = "link")]
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
