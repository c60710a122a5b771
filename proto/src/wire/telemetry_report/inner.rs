//! The truncated packet a report carries: its 5-tuple, IPv4 and TCP/UDP headers (behind an
//! optional Ethernet header), and where an embedded INT stack is looked for. The shim and stack
//! themselves are `int`'s.

use super::int::{parse_shim, EmbeddedInt, EmbeddedIntRepr};
use super::{be16, byte, field, get, ReportError, PROTO_TCP, PROTO_UDP};

/// An IPv4 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// IP protocol.
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// Length of [`FlowKey::to_bytes`].
pub const FLOW_KEY_LEN: usize = 13;

impl FlowKey {
    /// The 13-byte key the translator hashes: source IP, destination IP, protocol, source port,
    /// destination port, in network byte order (the layout `dta gen` uses for its flows).
    #[inline]
    pub fn to_bytes(&self) -> [u8; FLOW_KEY_LEN] {
        let mut b = [0u8; FLOW_KEY_LEN];
        b[0..4].copy_from_slice(&self.src);
        b[4..8].copy_from_slice(&self.dst);
        b[8] = self.proto;
        b[9..11].copy_from_slice(&self.sport.to_be_bytes());
        b[11..13].copy_from_slice(&self.dport.to_be_bytes());
        b
    }

    /// The inverse of [`FlowKey::to_bytes`].
    #[inline]
    pub fn from_bytes(b: &[u8; FLOW_KEY_LEN]) -> FlowKey {
        FlowKey {
            src: [b[0], b[1], b[2], b[3]],
            dst: [b[4], b[5], b[6], b[7]],
            proto: b[8],
            sport: u16::from_be_bytes([b[9], b[10]]),
            dport: u16::from_be_bytes([b[11], b[12]]),
        }
    }
}

/// What a report's truncated packet says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerPacket<'a> {
    /// The original packet's 5-tuple.
    pub flow: FlowKey,
    /// IPv4 total length of the original packet.
    pub ip_len: u16,
    /// IPv4 TTL as the reporting node saw it.
    pub ttl: u8,
    /// DSCP.
    pub dscp: u8,
    /// The embedded INT header and stack, if any.
    pub int: Option<EmbeddedInt<'a>>,
}

/// Where embedded INT is found in truncated packets (a deployment's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InnerConfig {
    /// UDP destination port that announces an INT shim (INT over UDP; "INT_TBD" in the spec,
    /// which IANA has not assigned). 0: none.
    pub md_udp_port: u16,
    /// DSCP value that announces an INT shim behind the packet's own TCP/UDP header. `None`:
    /// DSCP is not used.
    pub md_dscp: Option<u8>,
    /// Bits of the DSCP compared with `md_dscp`.
    pub md_dscp_mask: u8,
}

/// The default INT-over-UDP port of `dta` (INT_TBD has no IANA value; configure yours).
pub const DEFAULT_MD_UDP_PORT: u16 = 40045;

impl Default for InnerConfig {
    fn default() -> Self {
        InnerConfig {
            md_udp_port: DEFAULT_MD_UDP_PORT,
            md_dscp: None,
            md_dscp_mask: 0x3F,
        }
    }
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;

/// What the first byte of an inner packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InnerStart {
    /// An Ethernet header.
    Ethernet,
    /// An IPv4 header.
    Ipv4,
}

/// Reads the flow (and any embedded INT) from a truncated packet.
pub fn parse_inner<'a>(
    start: InnerStart,
    b: &'a [u8],
    cfg: &InnerConfig,
) -> core::result::Result<InnerPacket<'a>, ReportError> {
    let ip = match start {
        InnerStart::Ipv4 => b,
        InnerStart::Ethernet => {
            let mut et = be16(b, field::ETH_TYPE.start)?;
            let mut at = 14;
            if et == ETHERTYPE_VLAN {
                et = be16(b, 16)?;
                at = 18;
            }
            if et != ETHERTYPE_IPV4 {
                return Err(ReportError::UnsupportedInnerType);
            }
            &b[at..]
        }
    };
    let vi = byte(ip, field::IP_VER_IHL)?;
    if vi >> 4 != 4 {
        return Err(if vi >> 4 == 6 {
            ReportError::UnsupportedInnerType
        } else {
            ReportError::MalformedInner
        });
    }
    let ihl = (vi & 0x0F) as usize * 4;
    if ihl < 20 {
        return Err(ReportError::MalformedInner);
    }
    get::<20>(ip, 0)?;
    let l4 = ip.get(ihl..).ok_or(ReportError::Truncated)?;
    let dscp = byte(ip, field::IP_TOS)? >> 2;
    let mut flow = FlowKey {
        src: get::<4>(ip, field::IP_SRC.start)?,
        dst: get::<4>(ip, field::IP_DST.start)?,
        proto: byte(ip, field::IP_PROTO)?,
        sport: 0,
        dport: 0,
    };
    let mut int = None;
    if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
        flow.sport = be16(l4, field::L4_SPORT.start)?;
        flow.dport = be16(l4, field::L4_DPORT.start)?;
        let l4_len = if flow.proto == PROTO_UDP {
            8
        } else {
            let off = (byte(l4, field::TCP_DATA_OFF)? >> 4) as usize * 4;
            if off < 20 {
                return Err(ReportError::MalformedInner);
            }
            off
        };
        let by_port =
            flow.proto == PROTO_UDP && cfg.md_udp_port != 0 && flow.dport == cfg.md_udp_port;
        let by_dscp = cfg
            .md_dscp
            .is_some_and(|d| dscp & cfg.md_dscp_mask == d & cfg.md_dscp_mask);
        if by_port || by_dscp {
            let shim_at = if by_port { 8 } else { l4_len };
            let shim = l4.get(shim_at..).ok_or(ReportError::Truncated)?;
            if let Some((e, after)) = parse_shim(shim)? {
                int = Some(e);
                // INT 1.0 has no NPT: its shim keeps no original port or protocol.
                if by_port && e.version == 2 {
                    let npt = (shim[field::SHIM_TYPE] >> 2) & 0x3;
                    let f = be16(shim, field::SHIM_FIELD.start)?;
                    match npt {
                        // The original destination port, replaced by the INT port.
                        1 => flow.dport = f,
                        // A UDP header was added; the original L4 header follows the stack.
                        2 => {
                            flow.proto = f as u8;
                            let orig = shim.get(after..).ok_or(ReportError::Truncated)?;
                            if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
                                flow.sport = be16(orig, field::L4_SPORT.start)?;
                                flow.dport = be16(orig, field::L4_DPORT.start)?;
                            } else {
                                flow.sport = 0;
                                flow.dport = 0;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(InnerPacket {
        flow,
        ip_len: be16(ip, field::IP_LEN.start)?,
        ttl: byte(ip, field::IP_TTL)?,
        dscp,
        int,
    })
}

/// A truncated packet to emit: Ethernet (optional), IPv4, then TCP or UDP; with an embedded
/// INT header carried over UDP port `md_udp_port` (shim NPT 2: the original L4 header follows
/// the stack), as a sink that keeps the stack in its report would send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerPacketRepr<'h> {
    /// Start with an Ethernet header.
    pub ethernet: bool,
    /// The flow (protocol 6 or 17 gets a TCP or UDP header; others none).
    pub flow: FlowKey,
    /// TTL.
    pub ttl: u8,
    /// DSCP.
    pub dscp: u8,
    /// Payload bytes the original packet carried beyond its headers (only the IPv4 total
    /// length says so: the report is truncated after the headers).
    pub payload_len: u16,
    /// Embedded INT, carried over UDP to `md_udp_port`.
    pub int: Option<(EmbeddedIntRepr<'h>, u16)>,
}

impl InnerPacketRepr<'_> {
    fn l4_len(&self) -> usize {
        match self.flow.proto {
            PROTO_TCP => 20,
            PROTO_UDP => 8,
            _ => 0,
        }
    }

    /// Bytes [`InnerPacketRepr::emit`] writes (a multiple of 4 is not guaranteed; callers
    /// pad).
    pub fn buffer_len(&self) -> usize {
        let int = self.int.map_or(0, |(e, _)| 8 + e.buffer_len());
        self.ethernet as usize * 14 + 20 + int + self.l4_len()
    }

    /// Writes the packet to the front of `out`; returns its length. Panics if `out` is
    /// shorter than [`InnerPacketRepr::buffer_len`].
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.buffer_len();
        let out = &mut out[..n];
        out.fill(0);
        let mut at = 0;
        if self.ethernet {
            out[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
            out[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
            out[field::ETH_TYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            at = 14;
        }
        let ip_at = at;
        let headers = n - at;
        let ip = &mut out[ip_at..];
        ip[0] = 0x45;
        ip[field::IP_TOS] = self.dscp << 2;
        let total = (headers + self.payload_len as usize).min(u16::MAX as usize) as u16;
        ip[field::IP_LEN].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[field::IP_TTL] = self.ttl;
        ip[field::IP_PROTO] = if self.int.is_some() {
            PROTO_UDP
        } else {
            self.flow.proto
        };
        ip[field::IP_SRC].copy_from_slice(&self.flow.src);
        ip[field::IP_DST].copy_from_slice(&self.flow.dst);
        let sum = crate::wire::ipv4::checksum::fold(crate::wire::ipv4::checksum::sum(0, &ip[..20]));
        ip[10..12].copy_from_slice(&(!sum).to_be_bytes());
        at = 20;
        if let Some((e, port)) = self.int {
            let udp_len = (total as usize).saturating_sub(20).min(u16::MAX as usize) as u16;
            ip[at..at + 2].copy_from_slice(&self.flow.sport.to_be_bytes());
            ip[at + 2..at + 4].copy_from_slice(&port.to_be_bytes());
            ip[at + 4..at + 6].copy_from_slice(&udp_len.to_be_bytes());
            at += 8;
            at += e.emit(2, self.flow.proto as u16, &mut ip[at..]);
        }
        let l4 = &mut ip[at..];
        match self.flow.proto {
            PROTO_TCP => {
                l4[0..2].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&self.flow.dport.to_be_bytes());
                l4[field::TCP_DATA_OFF] = 5 << 4;
                l4[13] = 0x10; // ACK
                l4[14..16].copy_from_slice(&0xFFFFu16.to_be_bytes());
            }
            PROTO_UDP => {
                l4[0..2].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&self.flow.dport.to_be_bytes());
                let len = (8 + self.payload_len as usize).min(u16::MAX as usize) as u16;
                l4[4..6].copy_from_slice(&len.to_be_bytes());
            }
            _ => {}
        }
        n
    }
}
