//! The truncated packet a report carries: its 5-tuple, IPv4 and TCP/UDP headers (behind an
//! optional Ethernet header), and where an embedded INT stack is looked for. The shim and stack
//! themselves are `int`'s.

use super::int::{parse_shim, EmbeddedInt, EmbeddedIntRepr, IntShim};
use super::{ReportError, PROTO_TCP, PROTO_UDP};

mod field {
    use core::ops::Range;
    // Ethernet.
    pub const ETH_DST: Range<usize> = 0..6;
    pub const ETH_SRC: Range<usize> = 6..12;
    pub const ETH_TYPE: Range<usize> = 12..14;
    // IPv4.
    pub const IP_VER_IHL: usize = 0;
    pub const IP_TOS: usize = 1;
    pub const IP_LEN: Range<usize> = 2..4;
    pub const IP_FLAGS: usize = 6;
    pub const IP_TTL: usize = 8;
    pub const IP_PROTO: usize = 9;
    pub const IP_CHECKSUM: Range<usize> = 10..12;
    pub const IP_SRC: Range<usize> = 12..16;
    pub const IP_DST: Range<usize> = 16..20;
    // TCP and UDP.
    pub const L4_SPORT: Range<usize> = 0..2;
    pub const L4_DPORT: Range<usize> = 2..4;
    pub const UDP_LEN: Range<usize> = 4..6;
    pub const TCP_DATA_OFF: usize = 12;
    pub const TCP_FLAGS: usize = 13;
    pub const TCP_WINDOW: Range<usize> = 14..16;
    // The flow key (not a wire header: the bytes the translator hashes).
    pub const FK_SRC: Range<usize> = 0..4;
    pub const FK_DST: Range<usize> = 4..8;
    pub const FK_PROTO: usize = 8;
    pub const FK_SPORT: Range<usize> = 9..11;
    pub const FK_DPORT: Range<usize> = 11..13;
}

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
        b[field::FK_SRC].copy_from_slice(&self.src);
        b[field::FK_DST].copy_from_slice(&self.dst);
        b[field::FK_PROTO] = self.proto;
        b[field::FK_SPORT].copy_from_slice(&self.sport.to_be_bytes());
        b[field::FK_DPORT].copy_from_slice(&self.dport.to_be_bytes());
        b
    }

    /// The inverse of [`FlowKey::to_bytes`].
    #[inline]
    pub fn from_bytes(b: &[u8; FLOW_KEY_LEN]) -> FlowKey {
        let a4 = |r: core::ops::Range<usize>| {
            [b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3]]
        };
        FlowKey {
            src: a4(field::FK_SRC),
            dst: a4(field::FK_DST),
            proto: b[field::FK_PROTO],
            sport: be16(b, field::FK_SPORT),
            dport: be16(b, field::FK_DPORT),
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

const ETH_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const IPV4_HEADER_LEN: usize = 20;
const UDP_HEADER_LEN: usize = 8;
const TCP_HEADER_LEN: usize = 20;

#[inline(always)]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

/// A view of a truncated packet's Ethernet header (one 802.1Q tag is stepped over).
#[derive(Debug, Clone, Copy)]
pub struct InnerEthernet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> InnerEthernet<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> InnerEthernet<T> {
        InnerEthernet { buffer }
    }

    /// Wraps a buffer holding the header and, if tagged, the tag.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<InnerEthernet<T>, ReportError> {
        let e = InnerEthernet::new_unchecked(buffer);
        let len = e.buffer.as_ref().len();
        if len < ETH_HEADER_LEN || e.tagged() && len < ETH_HEADER_LEN + VLAN_TAG_LEN {
            return Err(ReportError::Truncated);
        }
        Ok(e)
    }

    #[inline]
    fn tagged(&self) -> bool {
        be16(self.buffer.as_ref(), field::ETH_TYPE) == ETHERTYPE_VLAN
    }

    /// Bytes of header and tag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            ETH_HEADER_LEN + VLAN_TAG_LEN
        } else {
            ETH_HEADER_LEN
        }
    }

    /// The EtherType of the payload (behind the tag, if any).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(
            self.buffer.as_ref(),
            self.header_len() - 2..self.header_len(),
        )
    }
}

impl<'a> InnerEthernet<&'a [u8]> {
    /// What follows the header (and tag), for as long as the buffer.
    #[inline]
    pub fn into_payload(self) -> &'a [u8] {
        let at = self.header_len();
        &self.buffer[at..]
    }
}

/// A view of a truncated packet's IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct InnerIpv4<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> InnerIpv4<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> InnerIpv4<T> {
        InnerIpv4 { buffer }
    }

    /// Wraps a buffer holding a whole IPv4 header: version 4 (6 is
    /// [`ReportError::UnsupportedInnerType`], others [`ReportError::MalformedInner`]), a
    /// header length of at least 20 bytes ([`ReportError::MalformedInner`]), all of it there
    /// ([`ReportError::Truncated`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<InnerIpv4<T>, ReportError> {
        let b = buffer.as_ref();
        let vi = *b.first().ok_or(ReportError::Truncated)?;
        if vi >> 4 != 4 {
            return Err(if vi >> 4 == 6 {
                ReportError::UnsupportedInnerType
            } else {
                ReportError::MalformedInner
            });
        }
        let ihl = (vi & 0x0F) as usize * 4;
        if ihl < IPV4_HEADER_LEN {
            return Err(ReportError::MalformedInner);
        }
        if b.len() < IPV4_HEADER_LEN || b.len() < ihl {
            return Err(ReportError::Truncated);
        }
        Ok(InnerIpv4 { buffer })
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::IP_VER_IHL] & 0x0F) as usize * 4
    }

    /// DSCP.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::IP_TOS] >> 2
    }

    /// Total length.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IP_LEN)
    }

    /// TTL.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::IP_TTL]
    }

    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::IP_PROTO]
    }

    #[inline]
    fn addr(&self, r: core::ops::Range<usize>) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3]]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        self.addr(field::IP_SRC)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        self.addr(field::IP_DST)
    }
}

impl<'a> InnerIpv4<&'a [u8]> {
    /// What follows the header, for as long as the buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer[self.header_len()..]
    }
}

/// A view of the ports that open a TCP or UDP header.
#[derive(Debug, Clone, Copy)]
pub struct L4Ports<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> L4Ports<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> L4Ports<T> {
        L4Ports { buffer }
    }

    /// Wraps a buffer holding both ports.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<L4Ports<T>, ReportError> {
        if buffer.as_ref().len() < field::L4_DPORT.end {
            return Err(ReportError::Truncated);
        }
        Ok(L4Ports { buffer })
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::L4_SPORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::L4_DPORT)
    }
}

/// The length of the TCP header at the front of `l4`: its data offset must be there
/// ([`ReportError::Truncated`]) and at least 5 words ([`ReportError::MalformedInner`]).
#[inline]
fn tcp_header_len(l4: &[u8]) -> Result<usize, ReportError> {
    let off = (*l4.get(field::TCP_DATA_OFF).ok_or(ReportError::Truncated)? >> 4) as usize * 4;
    if off < TCP_HEADER_LEN {
        return Err(ReportError::MalformedInner);
    }
    Ok(off)
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
            let eth = InnerEthernet::new_checked(b)?;
            if eth.ethertype() != ETHERTYPE_IPV4 {
                return Err(ReportError::UnsupportedInnerType);
            }
            eth.into_payload()
        }
    };
    let ip = InnerIpv4::new_checked(ip)?;
    let l4 = ip.payload();
    let dscp = ip.dscp();
    let mut flow = FlowKey {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        proto: ip.protocol(),
        sport: 0,
        dport: 0,
    };
    let mut int = None;
    if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
        let ports = L4Ports::new_checked(l4)?;
        flow.sport = ports.src_port();
        flow.dport = ports.dst_port();
        let l4_len = if flow.proto == PROTO_UDP {
            UDP_HEADER_LEN
        } else {
            tcp_header_len(l4)?
        };
        let by_port =
            flow.proto == PROTO_UDP && cfg.md_udp_port != 0 && flow.dport == cfg.md_udp_port;
        let by_dscp = cfg
            .md_dscp
            .is_some_and(|d| dscp & cfg.md_dscp_mask == d & cfg.md_dscp_mask);
        if by_port || by_dscp {
            let shim_at = if by_port { UDP_HEADER_LEN } else { l4_len };
            let shim = l4.get(shim_at..).ok_or(ReportError::Truncated)?;
            if let Some((e, after)) = parse_shim(shim)? {
                int = Some(e);
                // INT 1.0 has no NPT: its shim keeps no original port or protocol.
                if by_port && e.version == 2 {
                    let s = IntShim::new_unchecked(shim, e.version);
                    let f = s.npt_field();
                    match s.npt() {
                        // The original destination port, replaced by the INT port.
                        1 => flow.dport = f,
                        // A UDP header was added; the original L4 header follows the stack.
                        2 => {
                            flow.proto = f as u8;
                            let orig = shim.get(after..).ok_or(ReportError::Truncated)?;
                            if flow.proto == PROTO_TCP || flow.proto == PROTO_UDP {
                                let ports = L4Ports::new_checked(orig)?;
                                flow.sport = ports.src_port();
                                flow.dport = ports.dst_port();
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
        ip_len: ip.total_len(),
        ttl: ip.ttl(),
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
            PROTO_TCP => TCP_HEADER_LEN,
            PROTO_UDP => UDP_HEADER_LEN,
            _ => 0,
        }
    }

    /// Bytes [`InnerPacketRepr::emit`] writes (a multiple of 4 is not guaranteed; callers
    /// pad).
    pub fn buffer_len(&self) -> usize {
        let int = self.int.map_or(0, |(e, _)| UDP_HEADER_LEN + e.buffer_len());
        self.ethernet as usize * ETH_HEADER_LEN + IPV4_HEADER_LEN + int + self.l4_len()
    }

    /// Writes the packet to the front of `out`; returns its length. Panics if `out` is
    /// shorter than [`InnerPacketRepr::buffer_len`].
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.buffer_len();
        let out = &mut out[..n];
        out.fill(0);
        let mut at = 0;
        if self.ethernet {
            out[field::ETH_DST].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
            out[field::ETH_SRC].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
            out[field::ETH_TYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            at = ETH_HEADER_LEN;
        }
        let ip_at = at;
        let headers = n - at;
        let ip = &mut out[ip_at..];
        ip[field::IP_VER_IHL] = 0x45;
        ip[field::IP_TOS] = self.dscp << 2;
        let total = (headers + self.payload_len as usize).min(u16::MAX as usize) as u16;
        ip[field::IP_LEN].copy_from_slice(&total.to_be_bytes());
        ip[field::IP_FLAGS] = 0x40; // DF
        ip[field::IP_TTL] = self.ttl;
        ip[field::IP_PROTO] = if self.int.is_some() {
            PROTO_UDP
        } else {
            self.flow.proto
        };
        ip[field::IP_SRC].copy_from_slice(&self.flow.src);
        ip[field::IP_DST].copy_from_slice(&self.flow.dst);
        let sum = crate::wire::ipv4::checksum::fold(crate::wire::ipv4::checksum::sum(
            0,
            &ip[..IPV4_HEADER_LEN],
        ));
        ip[field::IP_CHECKSUM].copy_from_slice(&(!sum).to_be_bytes());
        at = IPV4_HEADER_LEN;
        if let Some((e, port)) = self.int {
            let udp_len = (total as usize)
                .saturating_sub(IPV4_HEADER_LEN)
                .min(u16::MAX as usize) as u16;
            let udp = &mut ip[at..];
            udp[field::L4_SPORT].copy_from_slice(&self.flow.sport.to_be_bytes());
            udp[field::L4_DPORT].copy_from_slice(&port.to_be_bytes());
            udp[field::UDP_LEN].copy_from_slice(&udp_len.to_be_bytes());
            at += UDP_HEADER_LEN;
            at += e.emit(2, self.flow.proto as u16, &mut ip[at..]);
        }
        let l4 = &mut ip[at..];
        match self.flow.proto {
            PROTO_TCP => {
                l4[field::L4_SPORT].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[field::L4_DPORT].copy_from_slice(&self.flow.dport.to_be_bytes());
                l4[field::TCP_DATA_OFF] = ((TCP_HEADER_LEN / 4) as u8) << 4;
                l4[field::TCP_FLAGS] = 0x10; // ACK
                l4[field::TCP_WINDOW].copy_from_slice(&0xFFFFu16.to_be_bytes());
            }
            PROTO_UDP => {
                l4[field::L4_SPORT].copy_from_slice(&self.flow.sport.to_be_bytes());
                l4[field::L4_DPORT].copy_from_slice(&self.flow.dport.to_be_bytes());
                let len =
                    (UDP_HEADER_LEN + self.payload_len as usize).min(u16::MAX as usize) as u16;
                l4[field::UDP_LEN].copy_from_slice(&len.to_be_bytes());
            }
            _ => {}
        }
        n
    }
}
