//! The XDP program that steers DTA traffic to an AF_XDP socket, assembled at run time.
//!
//! No BPF toolchain and no ELF object are involved: [`steering_program`] emits the eBPF
//! instructions for a given set of UDP ports, and [`XdpSteering::attach`] loads them with
//! `bpf(BPF_PROG_LOAD)`, creates the `XSKMAP`, and attaches the program to the interface with a
//! BPF link (`BPF_LINK_CREATE`, Linux ≥ 5.9), which the kernel detaches when the link's file
//! descriptor closes — including when the process dies.
//!
//! The program, in C terms:
//!
//! ```text
//! if (data + 42 > data_end) return XDP_PASS;            // Ethernet + IPv4 (IHL 5) + UDP
//! if (eth->h_proto != htons(ETH_P_IP)) return XDP_PASS; // ARP, IPv6, VLAN: the kernel's
//! if (ip->ver_ihl != 0x45 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
//! if (ip->frag_off & htons(0x3FFF)) return XDP_PASS;    // fragments: the kernel reassembles
//! if (udp->dest is one of PORTS)
//!     return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//! return XDP_PASS;
//! ```
//!
//! IPv4 options (IHL > 5) are left to the kernel: switches do not send them with reports.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One eBPF instruction as the kernel reads it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (low nibble) and source register (high nibble).
    pub regs: u8,
    /// Signed offset.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

/// XDP verdicts.
pub const XDP_PASS: i32 = 2;
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0F),
        off,
        imm,
    }
}

// Opcodes used (class | size/op | source).
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const JGT_X: u8 = 0x2d;
const JNE_K: u8 = 0x55;
const JEQ_K: u8 = 0x15;
const JA: u8 = 0x05;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;

/// The value a 16-bit load from packet memory yields for a big-endian field `v` (the program
/// runs on a little-endian host).
const fn wire16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// The steering program for `ports` (at most 64) with the XSKMAP's file descriptor `map_fd`.
///
/// Panics if `ports` is empty or longer than 64 (a configuration error caught at start-up).
pub fn steering_program(ports: &[u16], map_fd: RawFd) -> Vec<Insn> {
    assert!(
        !ports.is_empty() && ports.len() <= 64,
        "1..=64 ports can be steered"
    );
    let mut p = Vec::with_capacity(24 + ports.len());
    // r6 = ctx; r2 = data; r3 = data_end; r4 = data + 42.
    p.push(insn(MOV64_X, 6, 1, 0, 0));
    p.push(insn(LDX_W, 2, 6, XDP_MD_DATA, 0));
    p.push(insn(LDX_W, 3, 6, XDP_MD_DATA_END, 0));
    p.push(insn(MOV64_X, 4, 2, 0, 0));
    p.push(insn(ADD64_K, 4, 0, 0, 42));
    // Jumps to `pass` are patched once its position is known.
    let mut to_pass = Vec::new();
    to_pass.push(p.len());
    p.push(insn(JGT_X, 4, 3, 0, 0));
    p.push(insn(LDX_H, 5, 2, 12, 0));
    to_pass.push(p.len());
    p.push(insn(JNE_K, 5, 0, 0, wire16(0x0800)));
    p.push(insn(LDX_B, 5, 2, 14, 0));
    to_pass.push(p.len());
    p.push(insn(JNE_K, 5, 0, 0, 0x45));
    p.push(insn(LDX_B, 5, 2, 23, 0));
    to_pass.push(p.len());
    p.push(insn(JNE_K, 5, 0, 0, 17));
    p.push(insn(LDX_H, 5, 2, 20, 0));
    p.push(insn(AND64_K, 5, 0, 0, wire16(0x3FFF)));
    to_pass.push(p.len());
    p.push(insn(JNE_K, 5, 0, 0, 0));
    p.push(insn(LDX_H, 5, 2, 36, 0));
    let mut to_redirect = Vec::new();
    for &port in ports {
        to_redirect.push(p.len());
        p.push(insn(JEQ_K, 5, 0, 0, wire16(port)));
    }
    to_pass.push(p.len());
    p.push(insn(JA, 0, 0, 0, 0));
    // redirect: return bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS).
    let redirect = p.len();
    p.push(insn(LDX_W, 2, 6, XDP_MD_RX_QUEUE_INDEX, 0));
    p.push(insn(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd));
    p.push(insn(0, 0, 0, 0, 0));
    p.push(insn(MOV64_K, 3, 0, 0, XDP_PASS));
    p.push(insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP));
    p.push(insn(EXIT, 0, 0, 0, 0));
    // pass: return XDP_PASS.
    let pass = p.len();
    p.push(insn(MOV64_K, 0, 0, 0, XDP_PASS));
    p.push(insn(EXIT, 0, 0, 0, 0));
    for i in to_pass {
        p[i].off = (pass - i - 1) as i16;
    }
    for i in to_redirect {
        p[i].off = (redirect - i - 1) as i16;
    }
    p
}

/// How the program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Generic XDP (any driver, after the skb is built).
    Skb,
    /// Native (driver) XDP; veth supports it.
    Native,
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;

/// `union bpf_attr` is 144 bytes on current kernels; trailing bytes must be zero.
#[repr(C, align(8))]
struct BpfAttr([u8; 144]);

impl BpfAttr {
    fn new() -> BpfAttr {
        BpfAttr([0; 144])
    }
    fn u32_at(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64_at(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut BpfAttr) -> io::Result<i32> {
    // SAFETY: attr is a zero-initialised bpf_attr image of the size passed; the kernel reads
    // (and for some commands writes) only within it. Pointers stored in it are kept alive by
    // the caller for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            size_of::<BpfAttr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The steering program attached to one interface, with its XSKMAP.
///
/// Dropping it closes the link and detaches the program.
#[derive(Debug)]
pub struct XdpSteering {
    link: OwnedFd,
    map: OwnedFd,
    prog: OwnedFd,
    ifindex: u32,
}

impl XdpSteering {
    /// Loads the program for `ports` and attaches it to interface `ifindex`. `queues` is the
    /// number of XSKMAP slots (one per receive queue that may be served).
    pub fn attach(ifindex: u32, ports: &[u16], mode: XdpMode, queues: u32) -> io::Result<Self> {
        if ports.is_empty() || ports.len() > 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "1..=64 UDP ports can be steered",
            ));
        }
        let mut a = BpfAttr::new();
        a.u32_at(0, BPF_MAP_TYPE_XSKMAP)
            .u32_at(4, 4)
            .u32_at(8, 4)
            .u32_at(12, queues.max(1));
        a.0[28..28 + 8].copy_from_slice(b"dta_xsks");
        let map = owned(bpf(BPF_MAP_CREATE, &mut a)?);

        let insns = steering_program(ports, map.as_raw_fd());
        let license = b"Dual MIT/GPL\0";
        let mut log = vec![0u8; 64 * 1024];
        let mut a = BpfAttr::new();
        a.u32_at(0, BPF_PROG_TYPE_XDP)
            .u32_at(4, insns.len() as u32)
            .u64_at(8, insns.as_ptr() as u64)
            .u64_at(16, license.as_ptr() as u64)
            .u32_at(24, 1)
            .u32_at(28, log.len() as u32)
            .u64_at(32, log.as_mut_ptr() as u64)
            .u32_at(68, BPF_XDP);
        a.0[48..48 + 9].copy_from_slice(b"dta_steer");
        let prog = match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => owned(fd),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "loading the XDP program: {e}; verifier: {}",
                        String::from_utf8_lossy(&log[..end]).trim()
                    ),
                ));
            }
        };

        let flags = match mode {
            XdpMode::Skb => XDP_FLAGS_SKB_MODE,
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
        };
        let mut a = BpfAttr::new();
        a.u32_at(0, prog.as_raw_fd() as u32)
            .u32_at(4, ifindex)
            .u32_at(8, BPF_XDP)
            .u32_at(12, flags);
        let link = owned(bpf(BPF_LINK_CREATE, &mut a).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("attaching the XDP program to ifindex {ifindex} ({mode:?}): {e}"),
            )
        })?);
        Ok(XdpSteering {
            link,
            map,
            prog,
            ifindex,
        })
    }

    /// Steers queue `queue`'s matching packets to the AF_XDP socket `xsk_fd`.
    pub fn register(&self, queue: u32, xsk_fd: RawFd) -> io::Result<()> {
        let key = queue;
        let value = xsk_fd as u32;
        let mut a = BpfAttr::new();
        a.u32_at(0, self.map.as_raw_fd() as u32)
            .u64_at(8, &key as *const u32 as u64)
            .u64_at(16, &value as *const u32 as u64)
            .u64_at(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
    }

    /// The interface the program is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// File descriptors of the link, the program and the map (for diagnostics).
    pub fn fds(&self) -> (RawFd, RawFd, RawFd) {
        (
            self.link.as_raw_fd(),
            self.prog.as_raw_fd(),
            self.map.as_raw_fd(),
        )
    }
}

/// The index of interface `name`.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter for exactly the instructions `steering_program` emits, to check its
    /// verdicts on real frames without a kernel. Returns `Some(queue)` for a redirect.
    fn run(prog: &[Insn], frame: &[u8], queue: u32) -> Option<u32> {
        let mut r = [0u64; 11];
        // Packet pointers are offsets; data = 0, data_end = len; ctx is register 1.
        let mut pc = 0;
        loop {
            let i = prog[pc];
            let dst = (i.regs & 0x0F) as usize;
            let src = (i.regs >> 4) as usize;
            pc += 1;
            match i.code {
                MOV64_X => {
                    r[dst] = if src == 1 && pc == 1 {
                        u64::MAX
                    } else {
                        r[src]
                    }
                }
                LDX_W if r[src] == u64::MAX => {
                    r[dst] = match i.off {
                        XDP_MD_DATA => 0,
                        XDP_MD_DATA_END => frame.len() as u64,
                        XDP_MD_RX_QUEUE_INDEX => queue as u64,
                        _ => panic!("ctx offset"),
                    }
                }
                LDX_H => {
                    let a = (r[src] as i64 + i.off as i64) as usize;
                    r[dst] = u16::from_le_bytes([frame[a], frame[a + 1]]) as u64;
                }
                LDX_B => r[dst] = frame[(r[src] as i64 + i.off as i64) as usize] as u64,
                ADD64_K => r[dst] = r[dst].wrapping_add(i.imm as i64 as u64),
                AND64_K => r[dst] &= i.imm as i64 as u64,
                MOV64_K => r[dst] = i.imm as i64 as u64,
                JGT_X if r[dst] > r[src] => pc = (pc as i64 + i.off as i64) as usize,
                JNE_K if r[dst] != i.imm as i64 as u64 => pc = (pc as i64 + i.off as i64) as usize,
                JEQ_K if r[dst] == i.imm as i64 as u64 => pc = (pc as i64 + i.off as i64) as usize,
                JA => pc = (pc as i64 + i.off as i64) as usize,
                JGT_X | JNE_K | JEQ_K => {}
                LD_IMM64 => {
                    r[dst] = 0xFEED;
                    pc += 1;
                }
                CALL => {
                    assert_eq!((i.imm, r[1], r[3]), (BPF_FUNC_REDIRECT_MAP, 0xFEED, 2));
                    r[0] = 4; // XDP_REDIRECT
                }
                EXIT => {
                    return match r[0] {
                        4 => Some(r[2] as u32),
                        2 => None,
                        v => panic!("verdict {v}"),
                    }
                }
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn frame(dport: u16) -> Vec<u8> {
        let mut out = vec![0; 128];
        let n = crate::frame::build_udp_frame(
            dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
            dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 2]),
            "192.0.2.1:999".parse().unwrap(),
            std::net::SocketAddrV4::new("192.0.2.2".parse().unwrap(), dport),
            1,
            b"payload",
            true,
            &mut out,
        );
        out.truncate(n);
        out
    }

    #[test]
    fn steers_only_the_given_udp_ports() {
        let prog = steering_program(&[40000, 4791], 7);
        assert_eq!(run(&prog, &frame(40000), 3), Some(3));
        assert_eq!(run(&prog, &frame(4791), 0), Some(0));
        assert_eq!(run(&prog, &frame(4790), 0), None);
        assert_eq!(run(&prog, &frame(53), 0), None);
        let mut arp = frame(4791);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(run(&prog, &arp, 0), None);
        let mut tcp = frame(4791);
        tcp[23] = 6;
        assert_eq!(run(&prog, &tcp, 0), None);
        let mut opts = frame(4791);
        opts[14] = 0x46;
        assert_eq!(run(&prog, &opts, 0), None);
        let mut frag = frame(4791);
        frag[20] = 0x20; // MF
        assert_eq!(run(&prog, &frag, 0), None);
        let mut later = frame(4791);
        later[20] = 0x40; // DF only: not a fragment
        later[21] = 0;
        assert_eq!(run(&prog, &later, 0), Some(0));
        later[21] = 1; // offset 8
        assert_eq!(run(&prog, &later, 0), None);
        let short = frame(4791);
        assert_eq!(run(&prog, &short[..41], 0), None);
    }

    #[test]
    fn map_fd_goes_into_the_pseudo_load() {
        let prog = steering_program(&[1], 42);
        let ld = prog.iter().find(|i| i.code == LD_IMM64).unwrap();
        assert_eq!((ld.imm, ld.regs), (42, (BPF_PSEUDO_MAP_FD << 4) | 1));
        assert_eq!(size_of::<Insn>(), 8);
    }
}
