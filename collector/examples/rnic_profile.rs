//! Runs the software RNIC's responder over a fixed stream of RDMA WRITE frames, for
//! instruction-level profiling (`valgrind --tool=callgrind target/profiling/examples/rnic_profile
//! write 102400`): instructions ÷ frames is the responder's cost per executed WRITE, receive
//! syscall excluded; `--toggle-collect=rnic_profile::feed` leaves out building the
//! frames (the frames are handed over as a kernel UDP socket would:
//! UDP payloads with addresses, no IPv4 header, so the ICRC is checked by reconstruction).
//!
//! Cases: `write` (32-byte Key-Write slots at N = 2's addresses, AckReq on every 16th frame, as
//! the translator sends them), `append` (72-byte Append batches), `atomic` (FETCH_ADD).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use dta_collector::memory::Region;
use dta_collector::rnic::responder::{Access, DeviceConfig, QpConfig, Responder};
use dta_proto::batch::{Datagram, TxBatch};
use dta_proto::consts::ROCEV2_PORT;
use dta_proto::wire::ethernet::MacAddr;
use dta_proto::wire::ib::{opcode as op, AtomicEthRepr, Psn, Qpn, RethRepr};
use dta_proto::wire::roce::{FrameTemplate, RoceEndpoint, L2L4_LEN};

const BURST: usize = 32;
const REGION: usize = 1 << 24;

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "write".into());
    let n: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let (opcode, payload_len, step) = match what.as_str() {
        "write" => (op::RC_RDMA_WRITE_ONLY, 32, 32u64),
        "append" => (op::RC_RDMA_WRITE_ONLY, 72, 72),
        "atomic" => (op::RC_FETCH_ADD, 0, 8),
        other => panic!("unknown case {other}: write, append or atomic"),
    };

    let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 51), ROCEV2_PORT);
    let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 101), 10000);
    let mut rnic = Responder::new(DeviceConfig {
        local,
        ..DeviceConfig::default()
    });
    let region = Arc::new(Region::anonymous(REGION, false).expect("region"));
    let base = region.addr();
    let rkey = rnic.register(
        region,
        Access {
            remote_write: true,
            remote_read: false,
            remote_atomic: true,
        },
    );
    let qpn = rnic.create_qp(QpConfig {
        peer,
        peer_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        peer_qpn: Qpn::new(0x100),
        rq_psn: Psn::new(0),
        sq_psn: Psn::new(0),
        verify_icrc: true,
        recv_credits: 0,
    });

    // The frames, built once (the translator's templates), then replayed as UDP payloads.
    let ep = RoceEndpoint {
        src_ip: *peer.ip(),
        dst_ip: *local.ip(),
        src_port: peer.port(),
        ..RoceEndpoint::default()
    };
    let t = FrameTemplate::new(&ep, opcode, qpn, payload_len);
    let len = t.frame_len();
    let mut frames = vec![0u8; n * len];
    let payload = vec![0x5Au8; payload_len];
    for (i, f) in frames.chunks_exact_mut(len).enumerate() {
        let va = base + (i as u64 * 7919 * step) % (REGION as u64 - 128);
        let va = va & !7;
        let psn = Psn::new(i as u32 & 0xFF_FFFF);
        let ack_req = i % 16 == 15;
        if opcode == op::RC_FETCH_ADD {
            let a = AtomicEthRepr {
                va,
                rkey,
                swap_add: 1,
                compare: 0,
            };
            t.emit_atomic(f, psn, ack_req, &a);
        } else {
            let reth = RethRepr {
                va,
                rkey,
                dma_len: payload_len as u32,
            };
            t.emit_write(f, psn, ack_req, &reth, None, &payload);
        }
    }

    let mut tx = TxBatch::new(BURST * 2, 2048);
    let mut burst: Vec<Datagram<'_>> = Vec::with_capacity(BURST);
    for chunk in frames.chunks(len * BURST) {
        burst.clear();
        burst.extend(chunk.chunks_exact(len).map(|f| Datagram {
            src: peer,
            dst: local,
            ip: None,
            payload: &f[L2L4_LEN..],
        }));
        feed(&mut rnic, &burst, &mut tx);
        tx.clear();
    }
    let c = rnic.counters();
    assert_eq!(c.rcvd_pkts as usize, n, "every frame executed: {c:?}");
    println!("{what}: {n} frames executed");
}

/// The responder's work on one burst: `--toggle-collect=rnic_profile::feed` counts this alone.
#[inline(never)]
fn feed(rnic: &mut Responder, burst: &[Datagram<'_>], tx: &mut TxBatch) {
    rnic.handle_burst(burst, tx);
}
