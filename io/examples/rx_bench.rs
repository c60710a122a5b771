//! Receive-rate baselines on a veth pair with a kernel sender (root; uses scripts/netns.sh).
//!
//! ```text
//! cargo run --release -p dta-io --example rx_bench [--features af_xdp,dpdk] -- MODE [SECS]
//! ```
//! MODE: `recvmmsg` (bare loop), `udp` (the UdpBackend), `xdp-bare` (bare AF_XDP ring loop),
//! `af_xdp` (the AfXdpBackend), `dpdk-bare` (bare rte_eth_rx_burst loop over net_af_packet),
//! `dpdk` (the DpdkBackend over net_af_packet), `pcap` (in-memory replay through the
//! PcapBackend; no network), `all` (every mode built in). Namespace A runs a
//! `sendmmsg` sender of 32-byte UDP payloads to port 40000 for SECS seconds (default 3); the
//! receiver in namespace B counts what arrives after a 0.5 s warm-up. Bare loops only count
//! frames; backends parse them and hand datagrams to a closure, as the translator's worker does.
//! On a small shared machine the kernel sender is the bottleneck, so besides packets/s the
//! receiver thread's CPU time per packet is printed (busy-polling loops such as `dpdk-bare`
//! spend CPU even when idle, so theirs is an upper bound).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dta_io::backend::Backend;

const PORT: u16 = 40000;
const WARMUP: Duration = Duration::from_millis(500);

struct Topo {
    env: Vec<(&'static str, String)>,
}

impl Topo {
    fn up() -> Option<Topo> {
        let env = vec![
            ("NS_A", "dtab-a".to_string()),
            ("NS_B", "dtab-b".to_string()),
            ("IF_A", "dtab-va".to_string()),
            ("IF_B", "dtab-vb".to_string()),
        ];
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/netns.sh");
        let out = Command::new("bash")
            .args([script, "up"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(l) = text.lines().find(|l| l.starts_with("SKIP")) {
            let _ = writeln!(std::io::stderr(), "{l}");
            return None;
        }
        Some(Topo { env })
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/netns.sh");
        let _ = Command::new("bash")
            .args([script, "down"])
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
    }
}

fn enter_netns(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns exists");
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
}

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// Kernel sender: sendmmsg bursts of 64 until `stop`; returns datagrams sent.
fn sender(stop: Arc<AtomicBool>) -> u64 {
    enter_netns("dtab-a");
    let s = std::net::UdpSocket::bind(SocketAddrV4::new(A, 0)).unwrap();
    s.connect(SocketAddrV4::new(B, PORT)).unwrap();
    let mut payload = [0u8; 32];
    payload[..4].copy_from_slice(b"DTA!");
    let mut iov = [libc::iovec {
        iov_base: payload.as_mut_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    }; 64];
    // SAFETY: all-zero mmsghdr is valid; pointers are set below.
    let mut hdrs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
    for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: 64 valid headers pointing at a live payload.
        let r = unsafe { libc::sendmmsg(s.as_raw_fd(), hdrs.as_mut_ptr(), 64, 0) };
        if r > 0 {
            sent += r as u64;
        }
    }
    sent
}

/// Runs `rx` (which counts into the counter until stop) in namespace B against a sender.
fn measure(
    name: &str,
    secs: u64,
    rx: impl FnOnce(Arc<AtomicBool>, Arc<AtomicU64>) + Send + 'static,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (s2, c2) = (stop.clone(), count.clone());
    let receiver = std::thread::spawn(move || {
        enter_netns("dtab-b");
        let t = thread_cpu();
        rx(s2, c2);
        thread_cpu() - t
    });
    std::thread::sleep(Duration::from_millis(300));
    let s3 = stop.clone();
    let tx = std::thread::spawn(move || sender(s3));
    std::thread::sleep(WARMUP);
    let c0 = count.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let c1 = count.load(Ordering::Relaxed);
    let dt = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    let cpu = receiver.join().unwrap();
    let total = count.load(Ordering::Relaxed);
    let pps = (c1 - c0) as f64 / dt;
    println!(
        "{name:>10}: {pps:>8.0} packets/s received; {total} of {sent} sent ({:.1}%); \
         receiver thread {:.0} ns CPU/packet",
        100.0 * total as f64 / sent.max(1) as f64,
        cpu.as_nanos() as f64 / total.max(1) as f64
    );
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn bare_recvmmsg(stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let s = std::net::UdpSocket::bind(SocketAddrV4::new(B, PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // The same 8 MiB receive buffer the UdpBackend asks for, so only the loops differ.
    let v: libc::c_int = 8 << 20;
    // SAFETY: a valid int option and its size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    let mut bufs = vec![[0u8; 2048]; 64];
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: all-zero mmsghdr is valid; pointers are set below.
    let mut hdrs: Vec<libc::mmsghdr> = (0..64).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
    }
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: 64 headers pointing at live buffers.
        let r = unsafe {
            libc::recvmmsg(
                s.as_raw_fd(),
                hdrs.as_mut_ptr(),
                64,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r > 0 {
            count.fetch_add(r as u64, Ordering::Relaxed);
        }
    }
}

fn drive(mut be: Box<dyn Backend>, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let mut bytes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = be
            .recv_with(Duration::from_millis(100), &mut |burst| {
                for d in burst {
                    bytes += d.payload[0] as u64;
                }
            })
            .unwrap();
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
    std::hint::black_box(bytes);
}

fn udp_backend(stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    use dta_io::udp::{UdpBackend, UdpOptions, UdpSocket};
    let (rx, _) = UdpSocket::bind(SocketAddrV4::new(B, PORT), &UdpOptions::default())
        .unwrap()
        .split();
    let (_, tx) = UdpSocket::bind(SocketAddrV4::new(B, 0), &UdpOptions::default())
        .unwrap()
        .split();
    drive(Box::new(UdpBackend::new(vec![rx], tx)), stop, count);
}

#[cfg(feature = "af_xdp")]
fn xdp_cfg() -> dta_io::af_xdp::AfXdpConfig {
    let mut c = dta_io::af_xdp::AfXdpConfig::new("dtab-vb", &[PORT, 4791]);
    c.filter = dta_io::frame::FrameFilter::default();
    c
}

#[cfg(feature = "af_xdp")]
fn af_xdp_backend(stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let be = dta_io::af_xdp::AfXdpBackend::open(xdp_cfg()).expect("AF_XDP backend");
    drive(Box::new(be), stop, count);
}

#[cfg(feature = "af_xdp")]
fn bare_xdp(stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    use std::num::NonZeroU32;
    use xsk_rs::config::{BindFlags, LibxdpFlags, QueueSize, SocketConfig, UmemConfig};
    let cfg = xdp_cfg();
    let ring = QueueSize::new(cfg.ring_size).unwrap();
    let umem_cfg = UmemConfig::builder()
        .fill_queue_size(ring)
        .comp_queue_size(ring)
        .build()
        .unwrap();
    let (umem, frames) =
        xsk_rs::Umem::new(umem_cfg, NonZeroU32::new(cfg.ring_size).unwrap(), false).unwrap();
    let idx = dta_io::xdp_prog::ifindex(&cfg.ifname).unwrap();
    let steer =
        dta_io::xdp_prog::XdpSteering::attach(idx, &cfg.ports, cfg.mode, 1).expect("XDP program");
    let sc = SocketConfig::builder()
        .rx_queue_size(ring)
        .tx_queue_size(ring)
        .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
        .bind_flags(BindFlags::XDP_COPY | BindFlags::XDP_USE_NEED_WAKEUP)
        .build();
    // SAFETY: the UMEM is not shared.
    let (_tx, mut rx, fqcq) =
        unsafe { xsk_rs::Socket::new(sc, &umem, &cfg.ifname.parse().unwrap(), 0) }.unwrap();
    let (mut fq, _cq) = fqcq.unwrap();
    steer.register(0, rx.fd().as_raw_fd()).unwrap();
    // SAFETY: frames of this UMEM, in no ring.
    unsafe { fq.produce(&frames) };
    let mut descs = frames[..64].to_vec();
    let mut sum = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: descriptors of this UMEM.
        let n = unsafe { rx.consume(&mut descs) };
        if n == 0 {
            if fq.needs_wakeup() {
                fq.wakeup(rx.fd_mut(), 0).unwrap();
            }
            let _ = rx.poll(100);
            continue;
        }
        for d in &descs[..n] {
            // SAFETY: received frame of this UMEM, not yet given back.
            sum += unsafe { umem.data(d) }.contents()[0] as u64;
        }
        // SAFETY: the frames are ours again.
        unsafe { fq.produce(&descs[..n]) };
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
    std::hint::black_box(sum);
}

#[cfg(feature = "dpdk")]
fn dpdk_cfg() -> dta_io::dpdk::DpdkConfig {
    let mut c = dta_io::dpdk::DpdkConfig::new(
        &[
            "-l",
            "0",
            "--no-pci",
            "--no-huge",
            "-m",
            "512",
            "--file-prefix=dta-rx-bench",
            "--vdev=net_af_packet0,iface=dtab-vb,framecnt=16384",
            "--log-level=lib.eal:error",
            "--no-telemetry",
        ],
        Some("net_af_packet0"),
    );
    c.filter = dta_io::frame::FrameFilter::ports(&[PORT, 4791]).unwrap();
    c
}

/// DPDK's EAL exists once per process, so both DPDK modes share one opened port.
#[cfg(feature = "dpdk")]
fn dpdk_modes(secs: u64, bare: bool, backend: bool) {
    use std::sync::Mutex;
    let slot: Arc<Mutex<Option<dta_io::dpdk::DpdkBackend>>> = Arc::new(Mutex::new(None));
    let s = slot.clone();
    // Open in namespace B (the af_packet socket is made during EAL init).
    std::thread::spawn(move || {
        enter_netns("dtab-b");
        *s.lock().unwrap() = Some(dta_io::dpdk::DpdkBackend::open(dpdk_cfg()).expect("DPDK"));
    })
    .join()
    .unwrap();
    if bare {
        let s = slot.clone();
        measure("dpdk-bare", secs, move |stop, count| {
            let g = s.lock().unwrap();
            let port = g.as_ref().unwrap().port();
            let mut mbufs = [std::ptr::null_mut(); 32];
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: 32 slots; queue 0 of a started port used by this thread only.
                let n = unsafe { dta_dpdk_sys::dta_rx_burst(port, 0, mbufs.as_mut_ptr(), 32) };
                if n > 0 {
                    // SAFETY: mbufs just received.
                    unsafe { dta_dpdk_sys::dta_pktmbuf_free_bulk(mbufs.as_mut_ptr(), n as u32) };
                    count.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        });
    }
    if backend {
        let s = slot.clone();
        measure("dpdk", secs, move |stop, count| {
            let mut g = s.lock().unwrap();
            let be = g.as_mut().unwrap();
            let mut sum = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = be
                    .recv_with(Duration::from_millis(100), &mut |burst| {
                        for d in burst {
                            sum += d.payload[0] as u64;
                        }
                    })
                    .unwrap();
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            std::hint::black_box(sum);
        });
    }
    drop(slot.lock().unwrap().take());
    let _ = std::fs::remove_dir_all("/var/run/dpdk/dta-rx-bench");
}

/// In-memory pcap replay through the PcapBackend (no network, no sender).
fn pcap_replay() {
    use dta_io::pcap::{PcapBackend, PcapTrace, ReplayConfig};
    let mut frame = [0u8; 128];
    let n = dta_io::frame::build_udp_frame(
        dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
        dta_proto::wire::ethernet::MacAddr([2, 0, 0, 0, 0, 2]),
        SocketAddrV4::new(A, 1000),
        SocketAddrV4::new(B, PORT),
        0,
        &[7; 32],
        true,
        &mut frame,
    );
    let trace = PcapTrace::from_frames(std::iter::repeat_n(&frame[..n], 1024));
    let loops = 5000;
    let mut be = PcapBackend::new(
        Arc::new(trace),
        ReplayConfig {
            loops: Some(loops),
            burst: 32,
            ..ReplayConfig::default()
        },
    );
    let t0 = Instant::now();
    let mut got = 0u64;
    let mut sum = 0u64;
    while !be.is_finished() {
        got += be
            .recv_with(Duration::ZERO, &mut |burst| {
                for d in burst {
                    sum += d.payload[0] as u64;
                }
            })
            .unwrap() as u64;
    }
    std::hint::black_box(sum);
    let pps = got as f64 / t0.elapsed().as_secs_f64();
    println!(
        "{:>10}: {pps:>10.0} packets/s delivered from memory ({got} frames)",
        "pcap"
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("all");
    let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    if mode == "all" || mode == "pcap" {
        pcap_replay();
        if mode == "pcap" {
            return;
        }
    }
    let Some(_topo) = Topo::up() else {
        return;
    };
    let all = mode == "all";
    if all || mode == "recvmmsg" {
        measure("recvmmsg", secs, bare_recvmmsg);
    }
    if all || mode == "udp" {
        measure("udp", secs, udp_backend);
    }
    #[cfg(feature = "af_xdp")]
    {
        if all || mode == "xdp-bare" {
            measure("xdp-bare", secs, bare_xdp);
        }
        if all || mode == "af_xdp" {
            measure("af_xdp", secs, af_xdp_backend);
        }
    }
    #[cfg(feature = "dpdk")]
    {
        let (b, k) = (all || mode == "dpdk-bare", all || mode == "dpdk");
        if b || k {
            dpdk_modes(secs, b, k);
        }
    }
}
