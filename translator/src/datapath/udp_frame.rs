//! Complete Ethernet/IPv4/UDP frames around a payload, for raw backends (DTA NACKs), and
//! [`NackOut`], which frames a NACK for whichever backend runs.

use std::net::SocketAddrV4;

use dta_proto::wire::ethernet::{EthernetFrame, EthernetRepr, MacAddr, ETHERTYPE_IPV4};
use dta_proto::wire::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use dta_proto::wire::roce::L2L4_LEN;
use dta_proto::wire::udp::{UdpPacket, UdpRepr};

/// Writes Ethernet + IPv4 + UDP headers around a payload written by `payload` (which returns
/// its length). Returns the frame length, or 0 if the payload did not fit.
pub fn emit(
    buf: &mut [u8],
    src_mac: MacAddr,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: impl FnOnce(&mut [u8]) -> usize,
) -> usize {
    const HDR: usize = 14 + 20 + 8;
    if buf.len() < HDR {
        return 0;
    }
    let n = payload(&mut buf[HDR..]);
    if n == 0 {
        return 0;
    }
    let eth = EthernetRepr {
        src: src_mac,
        dst: MacAddr::BROADCAST,
        ethertype: ETHERTYPE_IPV4,
    };
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..14]));
    let ip = Ipv4Repr {
        src: *src.ip(),
        dst: *dst.ip(),
        protocol: PROTO_UDP,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        payload_len: 8 + n,
    };
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..34]));
    let udp = UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: n,
    };
    let mut u = UdpPacket::new_unchecked(&mut buf[34..HDR + n]);
    udp.emit(&mut u);
    u.fill_checksum(*src.ip(), *dst.ip());
    HDR + n
}

/// Where DTA NACKs go and how they are framed (the pipeline's and the primitives' NACKs).
#[derive(Debug, Clone, Copy)]
pub struct NackOut {
    /// Our address (the NACK's source).
    pub local: SocketAddrV4,
    /// Our MAC (raw backends).
    pub mac: MacAddr,
    /// Full Ethernet frames (raw backends) instead of UDP payloads.
    pub l2: bool,
    /// The UDP port reporters receive NACKs on.
    pub port: u16,
}

impl NackOut {
    /// Pushes `nack` for the reporter at `to` (its IPv4 address; the port is [`NackOut::port`])
    /// into `tx`. False if `tx` had no room.
    pub fn push(
        &self,
        tx: &mut dta_proto::batch::TxBatch,
        to: std::net::Ipv4Addr,
        nack: &dta_proto::wire::nack::NackRepr,
    ) -> bool {
        let dest = SocketAddrV4::new(to, self.port);
        let (l2, local, mac) = (self.l2, self.local, self.mac);
        tx.push_with(dest, if l2 { L2L4_LEN } else { 0 }, |buf| {
            if l2 {
                emit(buf, mac, local, dest, |p| nack.emit(p))
            } else {
                nack.emit(buf)
            }
        })
    }
}
