//! Smoke test of the Soft-RoCE VM harness: one hand-made RC RDMA WRITE Only frame must be ACKed by
//! Linux rxe and land in the guest's memory. Skips (and passes) where the VM can't run.
//!
//! The frame is built byte by byte on purpose: this checks the harness, the VM and the ICRC rule,
//! independently of the `proto` builders that the conformance tests use.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use dta_proto::crc::{Crc32, CRC_INIT, IEEE};
use dta_tests::rxe_vm::{vm_available, Vm, GUEST_IP, GUEST_MAC, HOST_IP, HOST_MAC};

const ETH: usize = 14;
const OP_RC_RDMA_WRITE_ONLY: u8 = 0x0A;
const OP_RC_ACK: u8 = 0x11;

/// RoCEv2 ICRC of an IPv4 packet without its trailing 4 ICRC bytes: CRC-32 over 8 bytes of 0xFF,
/// the IPv4 header with TOS, TTL and checksum all ones, the UDP header with checksum 0xFFFF, the
/// BTH with byte 4 all ones, and the rest. Sent least-significant byte first.
fn icrc(ip_packet: &[u8]) -> u32 {
    let ihl = usize::from(ip_packet[0] & 0x0F) * 4;
    let mut ip = ip_packet[..ihl].to_vec();
    ip[1] = 0xFF;
    ip[8] = 0xFF;
    ip[10..12].fill(0xFF);
    let mut udp = ip_packet[ihl..ihl + 8].to_vec();
    udp[6..8].fill(0xFF);
    let mut bth = ip_packet[ihl + 8..ihl + 20].to_vec();
    bth[4] = 0xFF;
    let mut s = IEEE.update(CRC_INIT, &[0xFF; 8]);
    for part in [&ip[..], &udp, &bth, &ip_packet[ihl + 20..]] {
        s = IEEE.update(s, part);
    }
    Crc32::finish(s)
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xFFFF) + (sum >> 16);
    !((folded & 0xFFFF) + (folded >> 16)) as u16
}

/// Ethernet/IPv4/UDP/BTH/RETH/payload/ICRC of an RC RDMA WRITE Only with AckReq set.
fn write_only(dqpn: u32, psn: u32, va: u64, rkey: u32, payload: &[u8]) -> Vec<u8> {
    let pad = (4 - payload.len() % 4) % 4;
    let udp_len = 8 + 12 + 16 + payload.len() + pad + 4;
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(ETH + ip_len);
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&HOST_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    // IPv4: no options, DSCP 0, id 0x1234, DF, TTL 64, UDP.
    f.extend_from_slice(&[0x45, 0x00]);
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 64, 17, 0, 0]);
    f.extend_from_slice(&HOST_IP.octets());
    f.extend_from_slice(&GUEST_IP.octets());
    let csum = ipv4_checksum(&f[ETH..ETH + 20]);
    f[ETH + 10..ETH + 12].copy_from_slice(&csum.to_be_bytes());
    // UDP: source port from the RoCEv2 entropy range, checksum 0 (allowed over IPv4).
    f.extend_from_slice(&49152u16.to_be_bytes());
    f.extend_from_slice(&dta_proto::consts::ROCEV2_PORT.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    // BTH: opcode, SE=0 M=0 PadCnt TVer=0, P_Key 0xFFFF, reserved, DestQP, AckReq, PSN.
    f.extend_from_slice(&[OP_RC_RDMA_WRITE_ONLY, (pad as u8) << 4, 0xFF, 0xFF, 0]);
    f.extend_from_slice(&dqpn.to_be_bytes()[1..]);
    f.push(0x80);
    f.extend_from_slice(&psn.to_be_bytes()[1..]);
    // RETH: virtual address, rkey, DMA length (without padding).
    f.extend_from_slice(&va.to_be_bytes());
    f.extend_from_slice(&rkey.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.extend(std::iter::repeat_n(0, pad));
    let crc = icrc(&f[ETH..]);
    f.extend_from_slice(&crc.to_le_bytes());
    f
}

/// `(dest QPN, PSN, AETH syndrome, ICRC ok)` if `frame` is an RC ACKNOWLEDGE over RoCEv2/IPv4.
fn parse_ack(frame: &[u8]) -> Option<(u32, u32, u8, bool)> {
    if frame.len() < ETH + 20 + 8 + 12 + 4 + 4 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ihl = usize::from(frame[ETH] & 0x0F) * 4;
    let udp = ETH + ihl;
    let dport = u16::from_be_bytes([frame[udp + 2], frame[udp + 3]]);
    let ip_len = usize::from(u16::from_be_bytes([frame[ETH + 2], frame[ETH + 3]]));
    let bth = &frame[udp + 8..];
    if frame[ETH + 9] != 17 || dport != dta_proto::consts::ROCEV2_PORT || bth[0] != OP_RC_ACK {
        return None;
    }
    let ip = frame.get(ETH..ETH + ip_len)?;
    let (body, wire_icrc) = ip.split_at(ip.len() - 4);
    let icrc_ok = icrc(body).to_le_bytes() == wire_icrc;
    let be24 = |b: &[u8]| u32::from_be_bytes([0, b[0], b[1], b[2]]);
    Some((be24(&bth[5..8]), be24(&bth[9..12]), bth[12], icrc_ok))
}

#[test]
fn icrc_matches_the_reference_worked_example() {
    // dta-reference.md §4.5: a Key-Write as an IPv4 packet; its last 4 bytes are the ICRC.
    let hex = "450000442c7540004011f99c0a0000650a000033271012b700300000\
               0a40ffff00000abc00e6fb2000007f00000005680000123400000008\
               79b8f899000000016fb20c95";
    let p: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(icrc(&p[..p.len() - 4]).to_le_bytes(), p[p.len() - 4..]);
}

#[test]
fn rxe_acks_a_hand_made_rdma_write() {
    let image = match vm_available() {
        Ok(image) => image,
        Err(reason) => {
            // Straight to stderr, past the test harness's output capture, so CI logs show it.
            let _ = writeln!(io::stderr(), "SKIP: rxe VM not available: {reason}");
            return;
        }
    };
    let t0 = Instant::now();
    let vm = Vm::boot(&image).expect("boot the rxe VM");
    eprintln!("rxe VM booted in {:.1?}", vm.boot_time());
    let (peer_qpn, psn) = (0x000100, 0x001000);
    let target = vm
        .start_target(peer_qpn, psn, "")
        .expect("start rxe_target");
    assert_eq!((target.peer_qpn, target.rq_psn), (peer_qpn, psn));

    let payload = b"dta: hand-made RDMA WRITE";
    let frame = write_only(target.qpn, psn, target.vaddr + 8, target.rkey, payload);
    vm.recv_frames(Duration::ZERO).unwrap();
    vm.send_frame(&frame).unwrap();
    let frames = vm
        .recv_until(Duration::from_secs(10), |f| parse_ack(f).is_some())
        .unwrap();
    let ack = frames.iter().find_map(|f| parse_ack(f));
    assert_eq!(
        ack,
        Some((peer_qpn, psn, 0x1F, true)),
        "want ACK (credits field 0x1F) for PSN {psn:#x} to QP {peer_qpn:#x} with a valid ICRC; \
         got {} frames: {frames:02x?}",
        frames.len()
    );
    assert_eq!(vm.dump(8, payload.len() as u32).unwrap(), payload);
    assert_eq!(
        vm.dump(0, 8).unwrap(),
        [0; 8],
        "bytes before the write stay untouched"
    );
    let (qp_state, _, rq_psn) = vm.target_state().unwrap();
    assert_eq!(
        (qp_state, rq_psn),
        (3, psn + 1),
        "QP stays in RTS, next PSN expected"
    );
    assert!(vm.rxe_counters().unwrap()["rcvd_pkts"] >= 1);
    eprintln!("smoke test (boot included) took {:.1?}", t0.elapsed());
}
