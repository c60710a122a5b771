//! DPDK smoke test over a net_ring vdev, whose RX and TX queues share one ring: what the
//! backend transmits comes back to it. Needs no privileges beyond what the EAL asks for with
//! `--no-huge --no-pci`; SKIPs when the EAL cannot start here.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dta_io::backend::Backend;
use dta_io::dpdk::{DpdkBackend, DpdkConfig};
use dta_io::frame::{build_udp_frame, FrameFilter};
use dta_proto::batch::TxBatch;
use dta_proto::wire::ethernet::MacAddr;

#[test]
fn net_ring_loopback_round_trip() {
    let name = format!("dta-ring-{}", std::process::id());
    let prefix = format!("--file-prefix={name}");
    let mut cfg = DpdkConfig::new(
        &[
            "-l",
            "0",
            "--no-pci",
            "--no-huge",
            "-m",
            "256",
            &prefix,
            "--vdev=net_ring0",
            "--log-level=lib.eal:error",
        ],
        Some("net_ring0"),
    );
    cfg.filter = FrameFilter::ports(&[40000, 4791]).unwrap();
    let be = match DpdkBackend::open(cfg) {
        Ok(b) => b,
        Err(e) => {
            common::remove_dpdk_runtime(&name);
            common::skip(&format!("DPDK EAL/net_ring unavailable: {e}"));
            return;
        }
    };
    // The backend runs on a thread the EAL did not start, as a translator worker does: its
    // first transmit registers it as an lcore, so its mbufs come from the mempool cache.
    let (s, be) = std::thread::spawn(move || {
        let mut be = be;
        assert_eq!(
            dta_io::dpdk::current_lcore(),
            None,
            "a fresh thread has no lcore"
        );
        let s = round_trip(&mut be);
        let id = dta_io::dpdk::current_lcore();
        assert!(id.is_some_and(|id| id != 0), "worker lcore {id:?}");
        (s, be)
    })
    .join()
    .expect("worker thread");
    // Each thread gives its lcore back when it exits: more threads than RTE_MAX_LCORE (128)
    // register one after another.
    for i in 0..160 {
        std::thread::spawn(move || {
            assert!(dta_io::dpdk::ensure_lcore(), "thread {i} got no lcore");
        })
        .join()
        .expect("lcore thread");
    }
    drop(be);
    common::remove_dpdk_runtime(&name);
    assert_eq!((s.tx_packets, s.rx_packets, s.rx_dropped), (60, 40, 20));
}

fn round_trip(be: &mut DpdkBackend) -> dta_io::backend::BackendStats {
    let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1000);
    let mut batch = TxBatch::new(64, 256);
    for i in 0..60u16 {
        let port = match i % 3 {
            0 => 40000,
            1 => 4791,
            _ => 53,
        };
        let b = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), port);
        assert!(batch.push_with(b, 42, |out| build_udp_frame(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            a,
            b,
            i,
            &i.to_be_bytes(),
            true,
            out
        )));
    }
    assert_eq!(be.send_batch(&batch).unwrap(), 60);
    let mut got = Vec::new();
    for _ in 0..100 {
        be.recv_with(Duration::from_millis(10), &mut |burst| {
            for d in burst {
                got.push((d.dst.port(), d.ip.unwrap().ident, d.payload.to_vec()));
            }
        })
        .unwrap();
        if got.len() == 40 {
            break;
        }
    }
    assert_eq!(
        got.len(),
        40,
        "two thirds of the frames are to served ports"
    );
    for (port, ident, payload) in &got {
        assert_ne!(*port, 53);
        assert_eq!(payload, &ident.to_be_bytes());
    }
    assert_eq!(be.frame_stats().filtered, 20);
    be.stats()
}
