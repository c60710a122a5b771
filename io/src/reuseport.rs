//! One UDP port shared by several workers: an `SO_REUSEPORT` group whose member is chosen per
//! datagram by a classic BPF program (`SO_ATTACH_REUSEPORT_CBPF`) that reads the RoCEv2 BTH.
//!
//! A real RNIC sends every ACK, NAK and READ response to UDP port 4791 of our RoCE address,
//! whatever source port our request used, so with several workers all their QPs' answers arrive
//! on one port. Each worker binds its own socket to that address with `SO_REUSEPORT` (in worker
//! order: the group's socket index is the bind order), and [`attach_qpn_steering`] attaches
//! [`qpn_steering_program`] to the group. The kernel runs it for every datagram with the UDP
//! payload at offset 0 (`reuseport_select_sock` pulls the UDP header before running the
//! program) and delivers the datagram to the socket whose index the program returns:
//!
//! - **RC answers** (destination QP other than 1): `dest_qp % workers`, read from BTH bytes
//!   5..8. The translator allocates its QPNs so that `qpn % workers == worker` (see
//!   [`worker_of_qpn`]).
//! - **CM MADs** (destination QP 1, the GSI): REP, REJ, MRA, DREQ and DREP all carry the
//!   receiver's communication ID as *Remote Communication ID* at transport offset 48 (BTH 12 +
//!   DETH 8 + MAD header 24 + 4). The translator starts each worker's communication IDs with
//!   the worker index in the top byte, so the program returns `remote_comm_id >> 24`.
//! - **Anything too short** for the field it needs, or naming a worker that does not exist, goes
//!   to socket 0 (a defined place, never the kernel's hash fallback), where the pipeline counts
//!   it as invalid and drops it.
//!
//! [`steer`] is the same decision in Rust, so tests and counters can predict the kernel's.

use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

use crate::udp::UdpSocket;

/// Transport offset of the BTH destination QP word (reserved byte + 24-bit QPN).
const BTH_DEST_QP_WORD: u32 = 4;
/// Bytes in a BTH: the shortest datagram whose destination QP can be read.
const BTH_LEN: u32 = 12;
/// QP number of the General Services Interface (CM MADs).
const GSI_QPN: u32 = 1;
/// Transport offset of a CM reply's Remote Communication ID (BTH + DETH + MAD header + 4).
const CM_REMOTE_COMM_ID: u32 = 12 + 8 + 24 + 4;

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const BPF_LD: u16 = 0x00;
const BPF_ALU: u16 = 0x04;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_W: u16 = 0x00;
const BPF_ABS: u16 = 0x20;
const BPF_LEN: u16 = 0x80;
const BPF_AND: u16 = 0x50;
const BPF_RSH: u16 = 0x70;
const BPF_MOD: u16 = 0x90;
const BPF_JEQ: u16 = 0x10;
const BPF_JGE: u16 = 0x30;
const BPF_K: u16 = 0x00;
const BPF_A: u16 = 0x10;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The worker that owns QPN `qpn` among `workers` (the translator's allocation rule).
pub fn worker_of_qpn(qpn: u32, workers: usize) -> usize {
    (qpn % workers.max(1) as u32) as usize
}

/// The socket index [`qpn_steering_program`] picks for a UDP payload, computed in Rust.
pub fn steer(payload: &[u8], workers: usize) -> usize {
    let word = |at: u32| -> Option<u32> {
        let at = at as usize;
        payload
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if payload.len() < BTH_LEN as usize {
        return 0;
    }
    let Some(w) = word(BTH_DEST_QP_WORD) else {
        return 0;
    };
    let qpn = w & 0x00FF_FFFF;
    if qpn != GSI_QPN {
        return worker_of_qpn(qpn, workers);
    }
    match word(CM_REMOTE_COMM_ID) {
        Some(id) if ((id >> 24) as usize) < workers => (id >> 24) as usize,
        _ => 0,
    }
}

/// The classic BPF program that steers RoCEv2 answers to the worker owning their QP (see the
/// module documentation). `workers` must be 1..=255.
pub fn qpn_steering_program(workers: usize) -> Vec<Insn> {
    let n = workers.clamp(1, 255) as u32;
    // Indices are fixed below; the jump offsets count instructions after the jump.
    vec![
        /* 0 */ stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        /* 1 */ jump(BPF_JMP | BPF_JGE | BPF_K, BTH_LEN, 0, 11), // short -> 13
        /* 2 */ stmt(BPF_LD | BPF_W | BPF_ABS, BTH_DEST_QP_WORD),
        /* 3 */ stmt(BPF_ALU | BPF_AND | BPF_K, 0x00FF_FFFF),
        /* 4 */ jump(BPF_JMP | BPF_JEQ | BPF_K, GSI_QPN, 2, 0), // GSI -> 7
        /* 5 */ stmt(BPF_ALU | BPF_MOD | BPF_K, n),
        /* 6 */ stmt(BPF_RET | BPF_A, 0),
        /* 7 */ stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        /* 8 */
        jump(BPF_JMP | BPF_JGE | BPF_K, CM_REMOTE_COMM_ID + 4, 0, 4), // short -> 13
        /* 9 */ stmt(BPF_LD | BPF_W | BPF_ABS, CM_REMOTE_COMM_ID),
        /* 10 */ stmt(BPF_ALU | BPF_RSH | BPF_K, 24),
        /* 11 */ jump(BPF_JMP | BPF_JGE | BPF_K, n, 1, 0), // no such worker -> 13
        /* 12 */ stmt(BPF_RET | BPF_A, 0),
        /* 13 */ stmt(BPF_RET | BPF_K, 0),
    ]
}

/// Attaches `prog` as the reuseport selector of the `SO_REUSEPORT` group `sock` belongs to.
///
/// Bind every member first, in index order, then attach (to any member).
pub fn attach_reuseport_cbpf(sock: &UdpSocket, prog: &[Insn]) -> io::Result<()> {
    let mut filters: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: filters.len() as u16,
        filter: filters.as_mut_ptr(),
    };
    // SAFETY: fprog points at `filters`, which lives until the call returns; the kernel copies
    // the program during setsockopt.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            size_of::<libc::sock_fprog>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches [`qpn_steering_program`] for `workers` sockets.
pub fn attach_qpn_steering(sock: &UdpSocket, workers: usize) -> io::Result<()> {
    attach_reuseport_cbpf(sock, &qpn_steering_program(workers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp::UdpOptions;
    use dta_proto::batch::TxBatch;
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::Duration;

    /// A BTH-shaped payload to `qpn` (opcode ACK), `len` bytes long.
    fn bth(qpn: u32, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len.max(12)];
        p[0] = 0x11;
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p.truncate(len);
        p
    }

    /// A CM reply to the GSI whose Remote Communication ID is `id`.
    fn mad(id: u32) -> Vec<u8> {
        let mut p = bth(GSI_QPN, 12 + 8 + 256 + 4);
        p[0] = 0x64;
        p[48..52].copy_from_slice(&id.to_be_bytes());
        p
    }

    /// Interprets the program the way the kernel does (out-of-bounds loads return 0), so the
    /// jump offsets are checked against [`steer`] without a socket.
    fn run(prog: &[Insn], payload: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                c if c == BPF_LD | BPF_W | BPF_LEN => a = payload.len() as u32,
                c if c == BPF_LD | BPF_W | BPF_ABS => {
                    let at = i.k as usize;
                    match payload.get(at..at + 4) {
                        Some(b) => a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                        None => return 0,
                    }
                }
                c if c == BPF_ALU | BPF_AND | BPF_K => a &= i.k,
                c if c == BPF_ALU | BPF_RSH | BPF_K => a >>= i.k,
                c if c == BPF_ALU | BPF_MOD | BPF_K => a %= i.k,
                c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                    pc += if a == i.k { i.jt } else { i.jf } as usize
                }
                c if c == BPF_JMP | BPF_JGE | BPF_K => {
                    pc += if a >= i.k { i.jt } else { i.jf } as usize
                }
                c if c == BPF_RET | BPF_A => return a,
                c if c == BPF_RET | BPF_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn program_and_rust_model_agree() {
        for n in 1..=8usize {
            let prog = qpn_steering_program(n);
            let mut cases: Vec<Vec<u8>> = (0..2000u32)
                .map(|q| {
                    bth(
                        q.wrapping_mul(2_654_435_761) & 0xFF_FFFF,
                        16 + (q as usize % 40),
                    )
                })
                .collect();
            cases.extend((0..12).map(|len| bth(7, len)));
            cases.extend((0..10u32).map(|w| mad((w << 24) | 0x12_3457)));
            cases.push(bth(GSI_QPN, 40));
            for p in &cases {
                let got = run(&prog, p) as usize;
                assert_eq!(
                    got,
                    steer(p, n),
                    "n={n} payload {:02x?}",
                    &p[..p.len().min(8)]
                );
                assert!(got < n);
            }
        }
    }

    #[test]
    fn steering_rules() {
        assert_eq!(steer(&bth(0x1234, 40), 4), 0x1234 % 4);
        assert_eq!(steer(&bth(0x1235, 12), 4), 1);
        assert_eq!(steer(&bth(0x1235, 11), 4), 0, "short: socket 0");
        assert_eq!(steer(&[], 4), 0);
        assert_eq!(steer(&mad(0x0300_0001), 4), 3);
        assert_eq!(steer(&mad(0x0900_0001), 4), 0, "no such worker: socket 0");
        assert_eq!(steer(&bth(GSI_QPN, 30), 4), 0, "truncated MAD: socket 0");
    }

    /// N sockets in one group on loopback: datagrams to many QPNs each land on the owner's
    /// socket; CM replies land on the worker named by the comm ID; short ones on socket 0.
    #[test]
    fn kernel_steers_by_qpn_on_loopback() {
        const N: usize = 3;
        let opts = UdpOptions {
            reuse_port: true,
            ..UdpOptions::default()
        };
        let first = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), &opts).unwrap();
        let addr = first.local_addr();
        let mut socks = vec![first];
        for _ in 1..N {
            socks.push(UdpSocket::bind(addr, &opts).unwrap());
        }
        if let Err(e) = attach_qpn_steering(&socks[0], N) {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP: SO_ATTACH_REUSEPORT_CBPF refused here: {e}"
            );
            return;
        }
        let mut rxs: Vec<_> = socks.into_iter().map(|s| s.split().0).collect();
        let sender = UdpSocket::bind(
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            &UdpOptions::default(),
        )
        .unwrap();
        let (_srx, mut stx) = sender.split();
        let mut expect = [0usize; N];
        let mut batch = TxBatch::new(64, 512);
        let mut payloads: Vec<Vec<u8>> = (0..300u32)
            .map(|i| bth(0x100 + i * 7, 12 + (i as usize % 30)))
            .collect();
        payloads.extend((0..N as u32).map(|w| mad((w << 24) | 0x55)));
        payloads.extend((1..12).map(|len| bth(0x101, len)));
        for p in &payloads {
            expect[steer(p, N)] += 1;
            assert!(batch.push_with(addr, 0, |b| {
                b[..p.len()].copy_from_slice(p);
                p.len()
            }));
            if batch.len() == 64 {
                assert_eq!(stx.send_batch(&batch).unwrap(), 64);
                batch.clear();
            }
        }
        stx.send_batch(&batch).unwrap();
        let mut got = [0usize; N];
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.iter().sum::<usize>() < payloads.len() && std::time::Instant::now() < deadline {
            for (w, rx) in rxs.iter_mut().enumerate() {
                rx.recv_with(Duration::from_millis(5), |burst| {
                    for d in burst {
                        assert_eq!(steer(d.payload, N), w, "landed on the wrong socket");
                        got[w] += 1;
                    }
                })
                .unwrap();
            }
        }
        assert_eq!(got, expect);
        assert!(expect.iter().all(|&e| e > 0));
    }
}
