//! DPDK smoke test over a net_pcap vdev, cross-checked with our own pcap code: a file written
//! by `PcapCapture` is read by libpcap inside DPDK and delivered through the `DpdkBackend`, and
//! what the backend transmits is written by libpcap and read back with `PcapTrace`. SKIPs when
//! the EAL or the net_pcap PMD is unavailable.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dta_io::backend::Backend;
use dta_io::dpdk::{DpdkBackend, DpdkConfig};
use dta_io::frame::{build_udp_frame, FrameFilter};
use dta_io::pcap::{PcapCapture, PcapTrace};
use dta_proto::batch::TxBatch;
use dta_proto::wire::ethernet::MacAddr;

fn frame(dport: u16, ident: u16) -> Vec<u8> {
    let mut out = vec![0; 256];
    let n = build_udp_frame(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1000),
        SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), dport),
        ident,
        &ident.to_be_bytes(),
        true,
        &mut out,
    );
    out.truncate(n);
    out
}

#[test]
fn net_pcap_reads_our_capture_and_writes_what_we_send() {
    let name = format!("dta-pcap-{}", std::process::id());
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let rx_path = dir.join("in.pcap");
    let tx_path = dir.join("out.pcap");
    let mut cap = PcapCapture::create(&rx_path).unwrap();
    for i in 0..50u16 {
        let f = frame(if i % 5 == 0 { 53 } else { 40000 }, i);
        cap.write_frame(Duration::from_micros(i as u64), &f)
            .unwrap();
    }
    cap.flush().unwrap();
    drop(cap);
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={}",
        rx_path.display(),
        tx_path.display()
    );
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
            &vdev,
            "--log-level=lib.eal:error",
            "--no-telemetry",
        ],
        Some("net_pcap0"),
    );
    cfg.filter = FrameFilter::ports(&[40000]).unwrap();
    let mut be = match DpdkBackend::open(cfg) {
        Ok(b) => b,
        Err(e) => {
            common::remove_dpdk_runtime(&name);
            let _ = std::fs::remove_dir_all(&dir);
            common::skip(&format!("DPDK net_pcap unavailable: {e}"));
            return;
        }
    };
    let mut idents = Vec::new();
    for _ in 0..50 {
        be.recv_with(Duration::from_millis(5), &mut |burst| {
            for d in burst {
                assert_eq!(d.dst.port(), 40000);
                idents.push(d.ip.unwrap().ident);
            }
        })
        .unwrap();
    }
    let expect: Vec<u16> = (0..50).filter(|i| i % 5 != 0).collect();
    assert_eq!(idents, expect);
    assert_eq!(be.frame_stats().filtered, 10);

    let mut batch = TxBatch::new(20, 256);
    for i in 0..20u16 {
        let f = frame(4791, 1000 + i);
        let dest = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 4791);
        assert!(batch.push_with(dest, 42, |out| {
            out[..f.len()].copy_from_slice(&f);
            f.len()
        }));
    }
    assert_eq!(be.send_batch(&batch).unwrap(), 20);
    drop(be); // closes the port, which flushes and closes the tx pcap
    common::remove_dpdk_runtime(&name);
    let back = PcapTrace::open(&tx_path).unwrap();
    assert_eq!(back.len(), 20);
    for i in 0..20 {
        assert_eq!(back.frame(i), batch.frame(i));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
