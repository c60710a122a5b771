//! The trait every packet I/O backend implements.
//!
//! A backend moves bytes and nothing else: it receives bursts into buffers it owns, hands them
//! over as [`Datagram`]s (UDP payload plus addresses, and the IPv4 details when it saw the
//! whole frame), and transmits a [`TxBatch`]. Raw backends (AF_XDP, DPDK, pcap) exchange
//! complete Ethernet frames, so producers must fill the batch with full frames for them
//! ([`Backend::l2_frames`]); the kernel UDP backend sends each frame's UDP payload part.
//!
//! A backend may carry several UDP flows (the translator's report port and its RoCEv2 port);
//! consumers demultiplex by [`Datagram::dst`]'s port.

use std::io;
use std::time::Duration;

use dta_proto::batch::{Datagram, TxBatch};

/// Counters every backend keeps (batching shows as `rx_ios` < `rx_packets`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BackendStats {
    /// Packets handed to the consumer.
    pub rx_packets: u64,
    /// Bytes handed to the consumer.
    pub rx_bytes: u64,
    /// Receive calls that returned data.
    pub rx_ios: u64,
    /// Packets dropped before the consumer saw them (kernel buffer, ring full, not ours...).
    pub rx_dropped: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Transmit calls.
    pub tx_ios: u64,
    /// Packets that could not be transmitted.
    pub tx_errors: u64,
}

/// A packet I/O backend.
pub trait Backend: Send {
    /// A short name for logs and metrics ("udp", "af_xdp", "dpdk", "pcap").
    fn name(&self) -> &'static str;

    /// True if transmitted frames must be complete Ethernet frames.
    fn l2_frames(&self) -> bool;

    /// Waits up to `timeout` for packets, receives one burst and hands it to `f`. Returns the
    /// number of datagrams handed over (0 on timeout).
    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize>;

    /// Transmits every frame of `batch`. Returns how many were accepted.
    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize>;

    /// Counters so far.
    fn stats(&self) -> BackendStats;

    /// Raw-frame backends: while `on`, learn each peer's MAC from the frames received (source
    /// IPv4 → source MAC) and send every transmitted frame to the MAC learned for its
    /// destination IPv4, whatever the producer wrote there ([`crate::frame::PeerMacs`]). A
    /// responder uses it to answer peers it was never told the MAC of. Returns false when the
    /// backend has no use for it (kernel UDP: the kernel resolves neighbours).
    fn answer_to_sender_mac(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }
}
