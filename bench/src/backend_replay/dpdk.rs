//! DPDK (net_af_packet on the veth pair; the `dpdk` feature, root): flow-controlled and
//! pre-filled, the bare loop in a child process (`dta bare-rx-dpdk`) with an EAL of its own.

use std::net::SocketAddrV4;
use std::path::Path;
use std::time::{Duration, Instant};

use dta_io::backend::Backend;
use dta_translator::config::{BackendKind, TranslatorConfig};

use super::flow::{in_netns, send_trace};
use super::prefilled::{send_from_a, sum_rounds};
use super::*;
use crate::gen::Scenario;
use crate::sender::PacedSender;
use crate::sys;
use crate::trace::Trace;
use dta_io::netns::{enter_netns, Netns, ADDR_A, ADDR_B};

/// Frames in the net_af_packet ring (`framecnt`): deep enough for the pre-filled runs.
#[cfg(feature = "dpdk")]
pub const DPDK_FRAMECNT: u32 = 32768;

/// The EAL arguments for DPDK on veth B: one net_af_packet port. (Two af_packet ports on one
/// interface in one process join the same PACKET_FANOUT group in DPDK 22.11 and split the
/// traffic between them, so the bare loop runs in a child process with its own EAL.)
#[cfg(feature = "dpdk")]
pub fn dpdk_eal_args(if_b: &str, prefix: &str) -> Vec<String> {
    [
        "-l",
        "0",
        "--no-pci",
        "--no-huge",
        "-m",
        "512",
        "--log-level=lib.eal:error",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--file-prefix={prefix}"),
        format!("--vdev=net_af_packet0,iface={if_b},framecnt={DPDK_FRAMECNT}"),
    ])
    .collect()
}

/// The child-process side of the bare DPDK loop (`dta bare-rx-dpdk`): enters namespace `ns`,
/// opens net_af_packet0 on `iface`, prints `READY`, counts packets until none arrived for
/// `idle` after the first (or for 30 s), and prints `{"packets", "secs", "cpu_secs"}` as JSON.
#[cfg(feature = "dpdk")]
pub fn bare_rx_dpdk_child(ns: &str, iface: &str, idle: Duration) -> Result<String, String> {
    use dta_io::dpdk::{DpdkBackend, DpdkConfig};
    use std::io::Write;
    enter_netns(ns)?;
    let prefix = format!("dta-bare-{}", std::process::id());
    let args = dpdk_eal_args(iface, &prefix);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut c = DpdkConfig::new(&a, Some("net_af_packet0"));
    c.filter = dta_io::frame::FrameFilter::ports(&[
        dta_proto::consts::DTA_PORT,
        dta_proto::consts::ROCEV2_PORT,
    ])
    .expect("two ports");
    let mut b = DpdkBackend::open(c).map_err(|e| format!("DPDK: {e}"))?;
    println!("READY {}", crate::sys::gettid());
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    // (time, thread CPU, packets) after the first burst, and at the latest CPU reading.
    let mut first: Option<(Instant, u64, u64)> = None;
    let mut at_cpu = (0u64, 0u64);
    let mut last = Instant::now();
    let mut n = 0u64;
    let mut bursts = 0u64;
    loop {
        let got = b
            .recv_with(Duration::from_millis(5), &mut |burst| {
                n += burst.len() as u64
            })
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        if got > 0 {
            bursts += 1;
            last = now;
            // The thread CPU clock is a system call (no vDSO): read it every 8th burst only,
            // and scale to the packets taken between the readings, so the bare loop does not
            // pay a clock per burst that the translator (measured from outside) does not.
            if first.is_none() {
                let c = sys::thread_cpu_ns();
                first = Some((now, c, n));
                at_cpu = (c, n);
            } else if bursts % 8 == 0 {
                at_cpu = (sys::thread_cpu_ns(), n);
            }
        }
        match first {
            Some(_) if now - last > idle => break,
            None if now - start > Duration::from_secs(30) => break,
            _ => {}
        }
    }
    let (t0, c0, n0) = first.unwrap_or((last, 0, 0));
    let secs = (last - t0).as_secs_f64();
    let measured = at_cpu.1.saturating_sub(n0);
    let cpu = if measured == 0 {
        0.0
    } else {
        at_cpu.0.saturating_sub(c0) as f64 * 1e-9 * n as f64 / measured as f64
    };
    drop(b);
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    Ok(
        serde_json::json!({"packets": n, "secs": secs, "cpu_secs": cpu, "bursts": bursts})
            .to_string(),
    )
}

/// DPDK (net_af_packet) on the veth pair. Needs the `dpdk` feature and root. `exe` is a `dta`
/// binary built with the feature (normally `std::env::current_exe()`): the bare loop runs as
/// `exe bare-rx-dpdk` in a child process. The sender is not flow-controlled for the bare loop
/// (the child cannot report progress); it sends at `o.rate` (0: as fast as it can), and the
/// bare side is judged by what it took.
#[cfg(feature = "dpdk")]
pub fn compare_dpdk(
    exe: &Path,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    o: &CompareOptions,
) -> Result<Comparison, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(exe)
        .args(["bare-rx-dpdk", "--ns", &net.ns_b, "--iface", &net.if_b])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    if !line.starts_with("READY") {
        let _ = child.wait();
        return Err(format!("bare DPDK loop did not start: {line:?}"));
    }
    let (t, loops, rate) = (trace.clone(), o.loops, o.rate);
    let target = SocketAddrV4::new(ADDR_B, dta_proto::consts::DTA_PORT);
    in_netns(&net.ns_a, move || {
        let mut s = PacedSender::new_from(ADDR_A, target, rate)?;
        s.set_window(u64::MAX / 4);
        send_trace(&mut s, &t, loops, &|| 0)
    })?;
    line.clear();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let _ = child.wait();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("bare DPDK loop: {e}: {line:?}"))?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let bare = Side::new("dpdk rx", f("packets") as u64, f("secs"), f("cpu_secs"));
    with_dpdk_translator(net, |configure| {
        translator_netns("dpdk", net, sc, trace, o, configure, bare)
    })
}

/// Runs `run` with the configuration of a translator on DPDK (net_af_packet on veth B, an EAL
/// file prefix of its own), then removes the EAL's runtime directory: without `--in-memory`
/// (which `--no-huge` excludes) the EAL leaves it behind.
#[cfg(feature = "dpdk")]
fn with_dpdk_translator<R>(
    net: &Netns,
    run: impl FnOnce(Box<dyn FnOnce(&mut TranslatorConfig)>) -> R,
) -> R {
    let prefix = format!("dta-replay-{}", std::process::id());
    let args = dpdk_eal_args(&net.if_b, &prefix);
    let r = run(Box::new(move |cfg: &mut TranslatorConfig| {
        cfg.translator.backend = BackendKind::Dpdk;
        cfg.dpdk.eal_args = args;
        cfg.dpdk.ports = vec!["net_af_packet0".into()];
    }));
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    r
}

/// DPDK (net_af_packet, `framecnt` 32,768) on the veth pair, pre-filled. The bare loop runs
/// in a child process (`exe bare-rx-dpdk`) that prints its thread ID; it is frozen there, and
/// measures its own drain from the first burst to the last.
#[cfg(feature = "dpdk")]
pub fn compare_dpdk_prefilled(
    exe: &Path,
    net: &Netns,
    sc: &Scenario,
    trace: &Trace,
    p: Prefill,
    freezer: &Freezer,
) -> Result<Comparison, String> {
    let p = Prefill {
        packets: p.packets.min(DPDK_FRAMECNT as u64 - 1024),
        ..p
    };
    let send = |n: u64| send_from_a(net, trace, n);
    let bare = sum_rounds("dpdk rx", p.rounds, || {
        bare_dpdk_child_round(exe, net, p.packets, freezer, &send)
    })?;
    with_dpdk_translator(net, |configure| {
        translator_netns_prefilled("dpdk", net, sc, trace, p, freezer, configure, bare)
    })
}

/// One pre-filled round of the bare DPDK loop in a child process (`exe bare-rx-dpdk`): the
/// child prints its thread ID, is frozen, filled by `send`, thawed, and reports the drain it
/// measured itself (first burst to last).
#[cfg(feature = "dpdk")]
fn bare_dpdk_child_round(
    exe: &Path,
    net: &Netns,
    packets: u64,
    freezer: &Freezer,
    send: &dyn Fn(u64) -> Result<u64, String>,
) -> Result<Side, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(exe)
        .args(["bare-rx-dpdk", "--ns", &net.ns_b, "--iface", &net.if_b])
        .args(["--idle-ms", "300"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let Some(tid) = line
        .trim()
        .strip_prefix("READY ")
        .and_then(|t| t.parse::<u64>().ok())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("bare DPDK loop did not start: {line:?}"));
    };
    let r = (|| {
        freezer.freeze(tid)?;
        send(packets)?;
        std::thread::sleep(Duration::from_millis(100));
        freezer.thaw()
    })();
    if let Err(e) = r {
        let _ = freezer.thaw();
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    line.clear();
    out.read_line(&mut line).map_err(|e| e.to_string())?;
    let _ = child.wait();
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("bare DPDK loop: {e}: {line:?}"))?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Ok(
        Side::new("dpdk rx", f("packets") as u64, f("secs"), f("cpu_secs"))
            .with_bursts(f("bursts") as u64),
    )
}
