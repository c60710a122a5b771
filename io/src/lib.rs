//! `dta-io`: packet I/O backends that only move bytes.
//!
//! The translator's pipeline and the collector's software RNIC are sans-I/O state machines; a
//! backend receives bursts into its own buffers, hands them over as
//! [`dta_proto::batch::Datagram`]s, and transmits a [`dta_proto::batch::TxBatch`]. Every backend
//! allocates its buffers once and makes no per-packet syscall.
//!
//! Backends:
//! - [`udp`]: kernel UDP sockets with `recvmmsg`/`sendmmsg` (the default; no privileges).
//! - [`reuseport`]: one UDP port shared by the workers, RoCEv2 answers steered to the worker
//!   owning their QP by a classic BPF program.
//! - [`pcap`]: replay of a capture held in memory (looping, paced) and capture of transmitted
//!   frames to a pcap file (no privileges).
//! - `af_xdp` (feature `af_xdp`): an AF_XDP socket on one interface queue, with its own XDP
//!   program ([`xdp_prog`], assembled at run time, loaded with `bpf(2)`) that steers only the
//!   DTA report ports and RoCEv2 to the socket and passes ARP and everything else to the kernel.
//! - `dpdk` (feature `dpdk`): a DPDK port (any PMD/vdev) through `dta-dpdk-sys`.
//!
//! Raw backends (pcap, AF_XDP, DPDK) share [`frame`]: they parse Ethernet/IPv4/UDP, deliver
//! only the UDP ports they serve with [`dta_proto::batch::IpMeta`] filled in, count everything
//! else by reason, and transmit whole Ethernet frames.
//!
//! Beside the backends, [`process`] reads this process's figures from `/proc` for the
//! `process_*` metrics both `/metrics` pages end with, and [`private_file`] creates the files
//! that hold secrets (captures, emitted connections) with mode 0600.

#[cfg(feature = "af_xdp")]
pub mod af_xdp;
pub mod backend;
pub mod config;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod frame;
pub mod netns;
pub mod pcap;
pub mod private_file;
pub mod process;
pub mod random;
pub mod reuseport;
pub mod signal;
pub mod udp;
pub mod xdp_prog;
