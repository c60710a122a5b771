//! DPDK smoke test over net_af_packet on a veth pair (root only; SKIP otherwise): a kernel UDP
//! sender in namespace A reaches the DPDK backend bound to B's veth.

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use common::{enter_netns, skip, Topology};
use dta_io::backend::Backend;
use dta_io::dpdk::{DpdkBackend, DpdkConfig};
use dta_io::frame::FrameFilter;

const PORT: u16 = 40000;
const N: usize = 1000;

#[test]
fn net_af_packet_receives_from_a_kernel_sender() {
    let Some(topo) = Topology::up("dp", true) else {
        return;
    };
    let (ns_a, ns_b) = (topo.get("NS_A").to_string(), topo.get("NS_B").to_string());
    let (addr_a, addr_b) = (topo.addr("ADDR_A"), topo.addr("ADDR_B"));
    let if_b = topo.get("IF_B").to_string();
    // Complete UDP checksums need TX checksum offload off on the veth (netns.sh, ethtool).
    let verify_udp = topo.checksums_complete();
    if !verify_udp {
        eprintln!(
            "NOTE: veth TX checksum offload is on (ethtool missing?): UDP checksums not verified"
        );
    }
    // The af_packet socket is opened during EAL init, in the calling thread's namespace.
    let receiver = std::thread::spawn(move || -> Result<(usize, u64), String> {
        enter_netns(&ns_b).unwrap();
        let prefix = format!("--file-prefix=dta-afp-{}", std::process::id());
        let vdev = format!("--vdev=net_af_packet0,iface={if_b},framecnt=16384");
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
            ],
            Some("net_af_packet0"),
        );
        cfg.filter = FrameFilter::ports(&[PORT])
            .unwrap()
            .with_checksums(true, verify_udp);
        let mut be = DpdkBackend::open(cfg).map_err(|e| {
            common::remove_dpdk_runtime(&format!("dta-afp-{}", std::process::id()));
            e.to_string()
        })?;
        std::fs::write(format!("/tmp/dta-afp-ready-{}", std::process::id()), b"1").unwrap();
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(15);
        while n < N && Instant::now() < deadline {
            be.recv_with(Duration::from_millis(50), &mut |burst| {
                for d in burst {
                    assert_eq!(d.dst.port(), PORT);
                    assert_eq!(&d.payload[..4], b"DTA!");
                    n += 1;
                }
            })
            .unwrap();
        }
        let drops = be.frame_stats();
        let malformed = drops.malformed + drops.bad_checksum;
        drop(be);
        common::remove_dpdk_runtime(&format!("dta-afp-{}", std::process::id()));
        Ok((n, malformed))
    });
    let ready = format!("/tmp/dta-afp-ready-{}", std::process::id());
    let t0 = Instant::now();
    while !std::path::Path::new(&ready).exists() {
        if receiver.is_finished() || t0.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !std::path::Path::new(&ready).exists() {
        match receiver.join().unwrap() {
            Err(e) => skip(&format!("DPDK net_af_packet unavailable: {e}")),
            Ok(_) => panic!("receiver ended before it was ready"),
        }
        return;
    }
    let _ = std::fs::remove_file(&ready);
    let sender = std::thread::spawn(move || {
        enter_netns(&ns_a).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(addr_a, 0)).unwrap();
        for i in 0..N {
            let mut p = *b"DTA!....";
            p[4..].copy_from_slice(&(i as u32).to_be_bytes());
            s.send_to(&p, SocketAddrV4::new(addr_b, PORT)).unwrap();
            if i % 128 == 127 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    sender.join().unwrap();
    let (n, malformed) = receiver.join().unwrap().unwrap();
    assert_eq!(n, N);
    assert_eq!(malformed, 0);
}
