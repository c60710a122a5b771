//! The pull collector's RDMA READ requester (`dta_collector::zero::reader::ReadQp`) against a
//! real responder: Linux Soft-RoCE (rdma_rxe) in a QEMU VM, its QP and MR made by `rxe_target`
//! (path MTU 1024, 4 READs in flight).
//!
//! READs of one and many packets must return the MR's bytes (as the guest dumps them); a lost
//! response (the requester asks again from the first missing one, and rxe replays the rest of
//! the READ with its own opcodes), a lost request (rxe's NAK "PSN sequence error") and a lost
//! burst (the requester's timeout) must all end with every READ complete and exact.
//!
//! Skips with a printed reason where QEMU or the VM image is unavailable.

use std::io::Write;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use dta_collector::zero::reader::{ReadQp, ReadQpConfig};
use dta_proto::batch::TxBatch;
use dta_proto::wire::ib::{Psn, Qpn, Rkey};
use dta_proto::wire::roce::{parse_frame, RocePacket, L2L4_LEN};
use dta_tests::rxe_vm::{vm_available, Target, Vm, GUEST_IP, GUEST_MAC, HOST_IP, HOST_MAC};

const PEER_QPN: u32 = 0x77;
const START_PSN: u32 = 0xFF_FFF0;
const MR_LEN: u32 = 64 * 1024;

fn skip(reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {reason}");
}

/// Frames the test loses on the way: the n-th request sent, the n-th response received.
struct Loss {
    out: Vec<u64>,
    back: Vec<u64>,
}

struct Wire<'a> {
    vm: &'a Vm,
    qp: ReadQp,
    sent: u64,
    received: u64,
    t0: Instant,
}

impl Wire<'_> {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn send(&mut self, tx: &mut TxBatch, loss: &Loss) {
        for i in 0..tx.len() {
            self.sent += 1;
            if loss.out.contains(&self.sent) {
                continue;
            }
            let mut f = tx.frame(i).to_vec();
            // The requester leaves the MACs to the kernel; the VM's wire needs them.
            f[0..6].copy_from_slice(&GUEST_MAC);
            f[6..12].copy_from_slice(&HOST_MAC);
            self.vm.send_frame(&f).unwrap();
        }
        tx.clear();
    }

    /// Runs until `want` READs completed (or 10 s), losing frames as `loss` says; returns the
    /// completed READs' (tag, bytes).
    fn run(&mut self, tx: &mut TxBatch, want: usize, loss: &Loss) -> Vec<(u64, Vec<u8>)> {
        let mut done = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        self.send(tx, loss);
        while done.len() < want && Instant::now() < deadline {
            let frames = self
                .vm
                .recv_until(Duration::from_millis(20), |_| false)
                .unwrap_or_default();
            for f in &frames {
                let Ok(pf) = parse_frame(f) else { continue };
                if pf.udp.dst_port != 4791 {
                    continue;
                }
                self.received += 1;
                if loss.back.contains(&self.received) {
                    continue;
                }
                let p = RocePacket::parse(&f[L2L4_LEN..]).expect("rxe sends RoCEv2");
                let now = self.now();
                self.qp
                    .handle(&p, now, tx, &mut |t, _, b| done.push((t, b.to_vec())));
            }
            let now = self.now();
            self.qp.poll(now, tx);
            self.send(tx, loss);
            assert_eq!(self.qp.fault(), None, "{:?}", self.qp.counters);
        }
        done
    }
}

fn config(t: &Target) -> ReadQpConfig {
    ReadQpConfig {
        local: SocketAddrV4::new(HOST_IP, 4791),
        peer: SocketAddrV4::new(GUEST_IP, 4791),
        local_qpn: Qpn::new(PEER_QPN),
        peer_qpn: Qpn::new(t.qpn),
        start_psn: Psn::new(START_PSN),
        rkey: Rkey(t.rkey),
        base: t.vaddr,
        pmtu: t.mtu,
        max_outstanding: 4,
        timeout_ns: 100_000_000,
        retries: 20,
    }
}

#[test]
fn reads_from_rxe_are_exact_through_lost_responses_requests_and_bursts() {
    let img = match vm_available() {
        Ok(i) => i,
        Err(e) => return skip(&e),
    };
    let vm = Vm::boot(&img).expect("VM boots");
    let t = vm
        .start_target(PEER_QPN, START_PSN, &format!("-n {MR_LEN} -m 1024"))
        .expect("target starts");
    assert_eq!(t.mtu, 1024);
    // Distinct bytes per 512-byte stretch, so a response put in the wrong place shows.
    for k in 0..MR_LEN / 512 {
        vm.fill(k * 512, 512, (k as u8).wrapping_mul(37) ^ 0x5A)
            .unwrap();
    }
    // The guest's view of the MR, dumped in pieces its control channel carries.
    let mut mem = Vec::with_capacity(MR_LEN as usize);
    for k in 0..MR_LEN / 4096 {
        mem.extend(vm.dump(k * 4096, 4096).expect("dump"));
    }
    let mut w = Wire {
        vm: &vm,
        qp: ReadQp::new(config(&t)),
        sent: 0,
        received: 0,
        t0: Instant::now(),
    };
    let mut tx = TxBatch::new(64, 2048);
    let check = |done: &[(u64, Vec<u8>)], reads: &[(u64, u64, u32)], what: &str| {
        assert_eq!(done.len(), reads.len(), "{what}: every READ completes");
        for ((t, b), &(tt, off, len)) in done.iter().zip(reads) {
            assert_eq!(*t, tt, "{what}: in issue order");
            assert!(
                *b == mem[off as usize..(off + len as u64) as usize],
                "{what}: READ {tt} ({off}+{len}) returned other bytes"
            );
        }
    };
    let none = Loss {
        out: vec![],
        back: vec![],
    };

    // One packet, three (crossing the PMTU), exactly one PMTU, nine: across the PSN wrap.
    let reads = [
        (1u64, 0u64, 100u32),
        (2, 1000, 3000),
        (3, 8192, 1024),
        (4, 20000, 9000),
    ];
    for &(tag, off, len) in &reads {
        assert!(w.qp.issue(tag, off, len, w.now(), &mut tx));
    }
    let done = w.run(&mut tx, reads.len(), &none);
    check(&done, &reads, "plain");

    // The third response of an 8-packet READ is lost: asked again from there; rxe replays.
    let base_rx = w.received;
    let reads = [(5u64, 30000u64, 8192u32), (6, 40000, 2048)];
    for &(tag, off, len) in &reads {
        assert!(w.qp.issue(tag, off, len, w.now(), &mut tx));
    }
    let loss = Loss {
        out: vec![],
        back: vec![base_rx + 3],
    };
    let done = w.run(&mut tx, reads.len(), &loss);
    check(&done, &reads, "lost response");
    assert!(w.qp.counters.read_retries >= 1, "{:?}", w.qp.counters);

    // The first of two requests is lost: rxe NAKs the second (PSN sequence error).
    let base_tx = w.sent;
    let reads = [(7u64, 50000u64, 1500u32), (8, 52000, 700)];
    for &(tag, off, len) in &reads {
        assert!(w.qp.issue(tag, off, len, w.now(), &mut tx));
    }
    let naks = w.qp.counters.nak_seq;
    let loss = Loss {
        out: vec![base_tx + 1],
        back: vec![],
    };
    let done = w.run(&mut tx, reads.len(), &loss);
    check(&done, &reads, "lost request");
    assert!(
        w.qp.counters.nak_seq > naks,
        "rxe NAKed: {:?}",
        w.qp.counters
    );

    // Every response of a READ is lost: the timeout asks again.
    let base_rx = w.received;
    let reads = [(9u64, 60000u64, 4096u32)];
    assert!(w.qp.issue(9, 60000, 4096, w.now(), &mut tx));
    let loss = Loss {
        out: vec![],
        back: (base_rx + 1..=base_rx + 4).collect(),
    };
    let timeouts = w.qp.counters.timeouts;
    let done = w.run(&mut tx, 1, &loss);
    check(&done, &reads, "lost burst");
    assert!(w.qp.counters.timeouts > timeouts, "{:?}", w.qp.counters);
    eprintln!("{:?}", w.qp.counters);
}
