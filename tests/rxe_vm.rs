//! A real RoCEv2 responder to test against: Linux Soft-RoCE (`rdma_rxe`) in a throw-away QEMU VM.
//!
//! `scripts/rxe-vm/` builds the image (a Debian kernel plus an initramfs) and boots it; this module
//! drives one private instance from a test:
//!
//! - [`vm_available`] finds (or builds, without installing anything) the image, or returns the
//!   reason to skip. CI prepares the image beforehand with `scripts/rxe-vm/prepare.sh`.
//! - [`Vm::boot`] starts QEMU in its own run directory with its own pair of loopback UDP ports, so
//!   a test VM never collides with another VM or a developer's. Dropping the [`Vm`] stops it.
//! - The guest NIC's Ethernet frames travel as UDP datagrams on 127.0.0.1 (QEMU `-netdev dgram`):
//!   [`Vm::send_frame`] hands a complete frame to the guest, [`Vm::recv_frames`] returns what the
//!   guest sent. The host side is a *virtual* station ([`HOST_IP`], [`HOST_MAC`]) with no IP
//!   stack; ARP requests for it are answered here.
//! - [`Vm::ctl`] runs shell commands in the guest; [`Vm::start_target`] starts the guest helper
//!   `rxe_target` (one RC QP and a remotely writable MR) and [`Vm::dump`] reads its memory back.
//!
//! Frames are built by the tests (with `dta_proto`), never here. Only one VM runs per test
//! process at a time: [`Vm::boot`] waits for the previous one to be dropped.
//!
//! No VM outlives its test. QEMU daemonizes (it is not our child), so three layers stop it:
//! - a guard owns QEMU's pid from the moment `boot.sh` reports it: dropping the [`Vm`], or a
//!   panic anywhere after boot (also during unwinding, also before [`Vm::boot`] returned)
//!   stops it (TERM, then KILL);
//! - a watchdog shell in its *own process group* kills QEMU if the test process dies without
//!   unwinding (SIGKILL, a harness timeout that kills the whole process group);
//! - every boot first reaps run directories left by dead test processes
//!   (`dta-rxe-<pid>-<n>` whose `<pid>` is gone): a QEMU still running from one is stopped
//!   ([`reap_stale_runs`]).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// IPv4 address of the virtual host station (the QP's peer as the guest sees it).
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// MAC address of the virtual host station (a permanent neighbour entry in the guest).
pub const HOST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
/// IPv4 address of the guest's `eth0`, the rxe device's RoCEv2 GID.
pub const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// MAC address of the guest's `eth0`.
pub const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// How long a guest shell command may take before [`Vm::ctl`] gives up.
const CTL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `rxe_target` may take to print its READY line (about 0.5 s under TCG).
const TARGET_TIMEOUT: Duration = Duration::from_secs(30);

// Guest-side files of the one rxe_target instance.
const TARGET_LOG: &str = "/tmp/target.log";
const TARGET_PID: &str = "/tmp/target.pid";
const TARGET_FIFO: &str = "/tmp/ctl";

/// A built VM image: the directory with `vmlinuz`, `vmlinux` and `initramfs.gz`.
#[derive(Clone, Debug)]
pub struct VmImage {
    /// The image directory (`${DTA_RXE_VM_DIR:-/tmp/dta-rxe-vm}/out`).
    pub dir: PathBuf,
}

/// The vendored tool's folder in this repository.
fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rxe-vm")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// The VM image, or a printable reason why VM tests must be skipped on this machine.
///
/// The first call runs `scripts/rxe-vm/prepare.sh --no-install`: nothing when the image is up to
/// date, a build (10–40 s) when it is missing or stale, never a package installation. Later
/// calls return the first answer. `DTA_SKIP_RXE_VM=1` skips without looking.
pub fn vm_available() -> Result<VmImage, String> {
    static ANSWER: OnceLock<Result<VmImage, String>> = OnceLock::new();
    ANSWER.get_or_init(find_or_build_image).clone()
}

fn find_or_build_image() -> Result<VmImage, String> {
    if std::env::var_os("DTA_SKIP_RXE_VM").is_some_and(|v| v == "1") {
        return Err("DTA_SKIP_RXE_VM=1".into());
    }
    if !on_path("qemu-system-x86_64") {
        return Err("qemu-system-x86_64 not found (scripts/rxe-vm/prepare.sh installs it)".into());
    }
    let prepare = scripts_dir().join("prepare.sh");
    let out = Command::new("bash")
        .arg(&prepare)
        .arg("--no-install")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", prepare.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("").trim();
    if let Some(reason) = last.strip_prefix("rxe-vm: SKIP: ") {
        return Err(reason.to_string());
    }
    let dir = last
        .strip_prefix("rxe-vm: READY ")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| {
            format!(
                "{} said neither READY nor SKIP: {stdout}{}",
                prepare.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let image = VmImage { dir: dir.into() };
    for f in ["vmlinuz", "initramfs.gz"] {
        if !image.dir.join(f).is_file() {
            return Err(format!("{} has no {f}", image.dir.display()));
        }
    }
    Ok(image)
}

/// What `rxe_target` printed on its `RXE_TARGET_READY` line: the guest QP and MR under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The guest QP's number (the BTH destination QP of requests).
    pub qpn: u32,
    /// The virtual requester QP the guest QP is connected to (the destination QP of its ACKs).
    pub peer_qpn: u32,
    /// Remote key of the MR.
    pub rkey: u32,
    /// Local key of the MR (for completeness; requests carry the rkey).
    pub lkey: u32,
    /// Guest virtual address of the MR's first byte (the RETH virtual address base).
    pub vaddr: u64,
    /// MR length in bytes.
    pub len: u32,
    /// The first PSN the guest QP expects from the peer.
    pub rq_psn: u32,
    /// The first PSN the guest QP sends with (its own requests, not ACKs).
    pub sq_psn: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// The guest's source GID (`::ffff:10.77.0.2`).
    pub gid: Ipv6Addr,
    /// Index of `gid` in the port's GID table.
    pub gid_index: u32,
    /// The peer's GID (`::ffff:10.77.0.1`).
    pub peer_gid: Ipv6Addr,
    /// The rxe device name (`rxe0`).
    pub dev: String,
}

impl Target {
    /// Parses a `RXE_TARGET_READY key=value ...` line.
    pub fn parse_ready(line: &str) -> Result<Target, String> {
        let kv = parse_kv(
            line.strip_prefix("RXE_TARGET_READY")
                .ok_or("not a READY line")?,
        );
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("READY line lacks {k}"))
        };
        let num = |k: &str| get(k).and_then(|v| parse_num(v).ok_or(format!("bad {k}={v}")));
        let num32 = |k: &str| num(k).and_then(|v| u32::try_from(v).map_err(|e| e.to_string()));
        let gid = |k: &str| get(k).and_then(|v| v.parse().map_err(|e| format!("bad {k}: {e}")));
        Ok(Target {
            qpn: num32("qpn")?,
            peer_qpn: num32("peer_qpn")?,
            rkey: num32("rkey")?,
            lkey: num32("lkey")?,
            vaddr: num("vaddr")?,
            len: num32("len")?,
            rq_psn: num32("rq_psn")?,
            sq_psn: num32("sq_psn")?,
            mtu: num32("mtu")?,
            gid: gid("gid")?,
            gid_index: num32("gid_index")?,
            peer_gid: gid("peer_gid")?,
            dev: get("dev")?.to_string(),
        })
    }
}

/// `key=value` pairs of one guest output line (words without `=` are ignored).
fn parse_kv(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// `0x`-prefixed hex or decimal.
fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Counters of `rdma statistic show link rxe0/1` (`name value` pairs after the link name).
fn parse_counters(out: &str) -> HashMap<String, u64> {
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] != "link" && !w[0].contains('/'))
        .filter_map(|w| Some((w[0].to_string(), w[1].parse().ok()?)))
        .collect()
}

/// An ARP reply from the virtual host if `frame` is an ARP request for [`HOST_IP`].
fn arp_reply(frame: &[u8]) -> Option<Vec<u8>> {
    // Ethernet(14) + ARP for IPv4 over Ethernet(28): htype 1, ptype 0x0800, hlen 6, plen 4.
    let arp = frame.get(14..42)?;
    if frame[12..14] != [0x08, 0x06] || arp[..8] != [0, 1, 8, 0, 6, 4, 0, 1] {
        return None;
    }
    let (sender_mac, sender_ip, target_ip) = (&arp[8..14], &arp[14..18], &arp[24..28]);
    if target_ip != HOST_IP.octets() {
        return None;
    }
    let mut r = Vec::with_capacity(42);
    r.extend_from_slice(sender_mac);
    r.extend_from_slice(&HOST_MAC);
    r.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
    r.extend_from_slice(&HOST_MAC);
    r.extend_from_slice(&HOST_IP.octets());
    r.extend_from_slice(sender_mac);
    r.extend_from_slice(sender_ip);
    Some(r)
}

/// The guest's control shell (a virtio-serial port on `RUN/ctl.sock` running `sh -s`).
struct Ctl {
    stream: UnixStream,
    buf: Vec<u8>,
    seq: u64,
}

impl Ctl {
    fn connect(path: &Path) -> io::Result<Ctl> {
        let mut ctl = Ctl {
            stream: UnixStream::connect(path)?,
            buf: Vec::new(),
            seq: 0,
        };
        // The guest shell may still be between restarts; the socket buffers until it reads,
        // but a command written just as the old shell exits is lost with it. Under TCG on a
        // loaded host that window has swallowed the first probe (CI, 04:50 UTC), so ask up to
        // three times; every attempt has its own end marker, so a late answer to an earlier
        // one is never mistaken for a later one.
        let mut last = None;
        for _ in 0..3 {
            match ctl.run("true", CTL_TIMEOUT) {
                Ok(_) => return Ok(ctl),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("three attempts timed out"))
    }

    /// Runs `cmd`, returns its output (stdout and stderr) and exit status.
    fn run(&mut self, cmd: &str, timeout: Duration) -> io::Result<(String, i32)> {
        self.seq += 1;
        let marker = format!("__DTA_END_{}__ ", self.seq);
        self.stream
            .write_all(format!("{cmd}\necho {marker}$?\n").as_bytes())?;
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(at) = find(&self.buf, marker.as_bytes()) {
                let rest = &self.buf[at + marker.len()..];
                if let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                    let status = String::from_utf8_lossy(&rest[..nl])
                        .trim()
                        .parse()
                        .unwrap_or(-1);
                    let out = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                    self.buf.drain(..at + marker.len() + nl + 1);
                    return Ok((out, status));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let tail = String::from_utf8_lossy(&self.buf[self.buf.len().saturating_sub(500)..]);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("guest command timed out: {cmd:?}; output so far: {tail:?}"),
                ));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "guest control socket closed",
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if transient(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A read timeout or signal, after which the caller just looks at the clock and reads again.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// One VM per test process at a time (TCG emulation already keeps a core busy).
static VM_LOCK: Mutex<()> = Mutex::new(());

/// A running Soft-RoCE VM, private to the test that booted it. Dropping it stops QEMU.
pub struct Vm {
    run: PathBuf,
    qemu: QemuGuard,
    ctl: Mutex<Ctl>,
    link: UdpSocket,
    guest_addr: SocketAddr,
    boot_time: Duration,
    // Fields drop after `Drop::drop` has stopped QEMU: the watchdog is no longer needed then,
    // and the next test may boot.
    _watchdog: Watchdog,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Vm {
    /// Boots a private instance of `image` and waits until rxe0 is up (`RXE_VM_READY`).
    ///
    /// Takes about 5–10 s under TCG. Blocks while another [`Vm`] of this process is alive.
    pub fn boot(image: &VmImage) -> io::Result<Vm> {
        Self::boot_inner(image, None)
    }

    /// Like [`Vm::boot`], with `extra_cpio` (a newc cpio archive, plain or gzip'd) unpacked
    /// over the image's initramfs: the way to put extra programs into the guest.
    pub fn boot_with_initrd(image: &VmImage, extra_cpio: &Path) -> io::Result<Vm> {
        Self::boot_inner(image, Some(extra_cpio))
    }

    fn boot_inner(image: &VmImage, extra_cpio: Option<&Path>) -> io::Result<Vm> {
        let guard = VM_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let reaped = reap_stale_runs();
        if reaped > 0 {
            eprintln!("rxe_vm: stopped {reaped} QEMU(s) left behind by dead test processes");
        }
        let run = run_dir()?;
        // Armed before QEMU exists, so there is no moment in which our death would orphan it.
        let watchdog = Watchdog::spawn(&run);
        let t0 = Instant::now();
        let booted =
            Self::start_qemu(image, &run, extra_cpio).and_then(|(qemu_pid, link, guest_addr)| {
                // From here on a panic or an error drops the guard, which stops QEMU.
                let qemu = QemuGuard(qemu_pid);
                let boot_time = t0.elapsed();
                let ctl = Ctl::connect(&run.join("ctl.sock"))?;
                Ok((qemu, link, guest_addr, boot_time, ctl))
            });
        match booted {
            Ok((qemu, link, guest_addr, boot_time, ctl)) => Ok(Vm {
                run,
                qemu,
                ctl: Mutex::new(ctl),
                link,
                guest_addr,
                boot_time,
                _watchdog: watchdog,
                _one_at_a_time: guard,
            }),
            Err(e) => {
                if let Some(pid) = read_pid(&run) {
                    stop_pid(pid);
                }
                drop(watchdog);
                let _ = fs::remove_dir_all(&run);
                Err(e)
            }
        }
    }

    /// Runs `boot.sh` until QEMU is up; returns its pid, the bound frame socket and the guest
    /// side's address.
    fn start_qemu(
        image: &VmImage,
        run: &Path,
        extra_cpio: Option<&Path>,
    ) -> io::Result<(u32, UdpSocket, SocketAddr)> {
        // The frame socket is bound for the VM's whole life, so its port can't be taken. QEMU
        // binds the guest-side port itself; if another process grabbed it in between, QEMU
        // fails to start and we try another.
        let link = UdpSocket::bind("127.0.0.1:0")?;
        let host_port = link.local_addr()?.port();
        for attempt in 1.. {
            let guest_port = UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port();
            let mut boot = Command::new("bash");
            boot.arg(scripts_dir().join("boot.sh"));
            if let Some(cpio) = extra_cpio {
                boot.arg("-i").arg(cpio);
            }
            let status = boot
                .args(["-d", "-n", "udp", "-o"])
                .arg(&image.dir)
                .arg("-r")
                .arg(run)
                .env("UDP_HOST_PORT", host_port.to_string())
                .env("UDP_GUEST_PORT", guest_port.to_string())
                .env("HOST_IP", HOST_IP.to_string())
                .env("GUEST_IP", GUEST_IP.to_string())
                .env("HOST_MAC", mac_str(&HOST_MAC))
                .env("GUEST_MAC", mac_str(&GUEST_MAC))
                .stdin(Stdio::null())
                .stdout(File::create(run.join("boot.log"))?)
                .stderr(File::create(run.join("boot.err"))?)
                .status()?;
            if status.success() {
                let pid =
                    read_pid(run).ok_or_else(|| io::Error::other("boot.sh left no qemu.pid"))?;
                return Ok((
                    pid,
                    link,
                    SocketAddr::from((Ipv4Addr::LOCALHOST, guest_port)),
                ));
            }
            if let Some(pid) = read_pid(run) {
                stop_pid(pid);
            }
            let err = fs::read_to_string(run.join("boot.err")).unwrap_or_default();
            if attempt >= 3 || !err.contains("in use") {
                return Err(io::Error::other(format!(
                    "boot.sh failed ({status}): {err}"
                )));
            }
        }
        unreachable!("the retry loop returns")
    }

    /// The pid of this VM's QEMU process.
    pub fn qemu_pid(&self) -> u32 {
        self.qemu.0
    }

    /// Wall time from starting QEMU to `RXE_VM_READY`.
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }

    /// The host run directory (console.log, ctl.sock, qmp.sock); removed on drop.
    pub fn run_dir(&self) -> &Path {
        &self.run
    }

    /// The guest's serial console output so far (kernel messages, `/init`'s lines).
    pub fn console_log(&self) -> String {
        let raw = fs::read(self.run.join("console.log")).unwrap_or_default();
        String::from_utf8_lossy(&raw).replace('\r', "")
    }

    /// Runs a shell command in the guest and returns its output (stdout and stderr together).
    ///
    /// A non-zero exit status is not an error here; use [`Vm::ctl_status`] to see it.
    pub fn ctl(&self, cmd: &str) -> io::Result<String> {
        self.ctl_status(cmd).map(|(out, _)| out)
    }

    /// Runs a shell command in the guest and returns its output and exit status.
    pub fn ctl_status(&self, cmd: &str) -> io::Result<(String, i32)> {
        self.ctl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .run(cmd, CTL_TIMEOUT)
    }

    /// Starts a fresh `rxe_target` (killing the previous one): an RC QP in RTS connected to the
    /// virtual peer QP `peer_qpn`, expecting PSN `rq_psn` first, with a 4 KiB MR (zeroed).
    ///
    /// `extra_args` go to `rxe_target` as they are, e.g. `-m 4096` (path MTU), `-n 65536` (MR
    /// length), `-f 0xAA` (fill byte), `-s 0x2000` (its SQ PSN), `-R 16` (receive WQEs).
    pub fn start_target(&self, peer_qpn: u32, rq_psn: u32, extra_args: &str) -> io::Result<Target> {
        // The old instance unlinks its FIFO on exit, so it must be gone before the new one
        // creates it.
        self.ctl(&format!(
            "if [ -f {TARGET_PID} ]; then p=$(cat {TARGET_PID}); kill $p 2>/dev/null; i=0; \
             while kill -0 $p 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; fi; \
             rm -f {TARGET_FIFO} {TARGET_LOG}; \
             rxe_target -c {TARGET_FIFO} -q {peer_qpn:#x} -p {rq_psn:#x} {extra_args} \
             > {TARGET_LOG} 2>&1 & echo $! > {TARGET_PID}"
        ))?;
        let deadline = Instant::now() + TARGET_TIMEOUT;
        loop {
            // Ask for the log and whether the process still lives in one round trip.
            let out = self.ctl(&format!(
                "cat {TARGET_LOG}; kill -0 $(cat {TARGET_PID}) 2>/dev/null || echo TARGET_DEAD"
            ))?;
            for line in out.lines() {
                if line.starts_with("RXE_TARGET_READY") {
                    return Target::parse_ready(line).map_err(io::Error::other);
                }
                if line.starts_with("ERROR") || line == "TARGET_DEAD" {
                    return Err(io::Error::other(format!("rxe_target failed: {out}")));
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("rxe_target did not become ready: {out}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends one command to `rxe_target` and returns its first output line starting with
    /// `reply`, waiting in the guest (one shell round trip) for up to 5 s.
    fn target_request(&self, cmd: &str, reply: &str) -> io::Result<String> {
        // Writing to a FIFO nobody reads blocks forever: only write while the target lives (it
        // removes its FIFO on exit), and under `timeout`.
        let out = self.ctl(&format!(
            "if kill -0 $(cat {TARGET_PID} 2>/dev/null) 2>/dev/null && [ -p {TARGET_FIFO} ]; then \
               n=$(wc -l < {TARGET_LOG}); \
               timeout 5 sh -c \"echo '{cmd}' > {TARGET_FIFO}\" || echo FIFO_WRITE_FAILED; \
               for i in $(seq 100); do \
                 tail -n +$((n+1)) {TARGET_LOG} | grep -m1 '^{reply}' && break; sleep 0.05; \
               done; \
             else echo TARGET_NOT_RUNNING; fi"
        ))?;
        if out.lines().any(|l| l == "TARGET_NOT_RUNNING") {
            return Err(io::Error::other(format!(
                "rxe_target is not running (start_target first): {cmd}"
            )));
        }
        out.lines()
            .find(|l| l.starts_with(reply))
            .map(str::to_string)
            .ok_or_else(|| io::Error::other(format!("rxe_target did not answer {cmd:?}: {out}")))
    }

    /// The MR's bytes `off..off + len`, read by `rxe_target` in the guest.
    pub fn dump(&self, off: u32, len: u32) -> io::Result<Vec<u8>> {
        let line = self.target_request(&format!("dump {off} {len}"), "DUMP ")?;
        let kv = parse_kv(&line);
        kv.get("data")
            .and_then(|d| parse_hex(d))
            .filter(|d| d.len() == len as usize)
            .ok_or_else(|| io::Error::other(format!("bad dump reply: {line}")))
    }

    /// Sets the MR's bytes `off..off + len` to `byte` (not reported as a change).
    pub fn fill(&self, off: u32, len: u32, byte: u8) -> io::Result<()> {
        let line = self.target_request(&format!("fill {off} {len} {byte}"), "FILL ")?;
        if line.trim_end() == "FILL ok" {
            Ok(())
        } else {
            Err(io::Error::other(format!("fill failed: {line}")))
        }
    }

    /// Posts `n` more receive WQEs on the guest QP (for SEND and WRITE with immediate).
    pub fn post_recv(&self, n: u32) -> io::Result<()> {
        let line = self.target_request(&format!("post_recv {n}"), "POST_RECV ")?;
        if line.trim_end() == "POST_RECV ok" {
            Ok(())
        } else {
            Err(io::Error::other(format!("post_recv failed: {line}")))
        }
    }

    /// The guest QP's `(qp_state, sq_psn, rq_psn)`; `qp_state` is `enum ibv_qp_state`
    /// (2 = RTR, 3 = RTS, 6 = ERROR). `rq_psn` is the next PSN the QP expects.
    pub fn target_state(&self) -> io::Result<(u32, u32, u32)> {
        let line = self.target_request("state", "STATE ")?;
        let kv = parse_kv(&line);
        let get = |k| {
            kv.get(k)
                .and_then(|v| parse_num(v))
                .and_then(|v| u32::try_from(v).ok())
        };
        match (get("qp_state"), get("sq_psn"), get("rq_psn")) {
            (Some(s), Some(sq), Some(rq)) => Ok((s, sq, rq)),
            _ => Err(io::Error::other(format!("bad state reply: {line}"))),
        }
    }

    /// Everything `rxe_target` printed so far, one line each (`RXE_TARGET_READY`,
    /// `MEM_CHANGED off= len= data=`, `CQE ...`, `ASYNC_EVENT ...`, `DUMP ...`, ...).
    pub fn guest_log(&self) -> io::Result<Vec<String>> {
        Ok(self
            .ctl(&format!("cat {TARGET_LOG}"))?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The rxe device's counters (`rdma statistic show link rxe0/1`): `rcvd_pkts`, `sent_pkts`,
    /// `duplicate_request`, `out_of_seq_request`, `rcvd_seq_err`, ...
    pub fn rxe_counters(&self) -> io::Result<HashMap<String, u64>> {
        let (out, status) = self.ctl_status("rdma statistic show link rxe0/1")?;
        if status != 0 {
            return Err(io::Error::other(format!("rdma statistic failed: {out}")));
        }
        Ok(parse_counters(&out))
    }

    /// Hands one complete Ethernet frame (with FCS omitted) to the guest NIC.
    pub fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        self.link.send_to(frame, self.guest_addr).map(drop)
    }

    /// Every frame the guest sends within `timeout` (ARP requests for [`HOST_IP`] are answered
    /// and not returned). `Duration::ZERO` just drains what has already arrived.
    pub fn recv_frames(&self, timeout: Duration) -> io::Result<Vec<Vec<u8>>> {
        self.recv_until(timeout, |_| false)
    }

    /// Like [`Vm::recv_frames`] but returns as soon as a frame satisfies `done` (that frame is
    /// the last one returned). Use it to wait for an expected reply without waiting out the
    /// whole timeout.
    pub fn recv_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[u8]) -> bool,
    ) -> io::Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut frames = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            // A zero read timeout is an error for std; 1 ms is "whatever is queued".
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            self.link.set_read_timeout(Some(left))?;
            match self.link.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if from != self.guest_addr {
                        continue;
                    }
                    let frame = &buf[..n];
                    if let Some(reply) = arp_reply(frame) {
                        self.send_frame(&reply)?;
                        continue;
                    }
                    frames.push(frame.to_vec());
                    if done(frame) {
                        return Ok(frames);
                    }
                }
                Err(e) if transient(&e) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Ok(frames);
            }
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let console = self.console_log();
            let tail: Vec<&str> = console.lines().rev().take(30).collect();
            eprintln!("---- rxe VM console (last 30 lines) ----");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        stop_pid(self.qemu.0);
        if std::env::var_os("DTA_RXE_VM_KEEP_RUN").is_none() {
            let _ = fs::remove_dir_all(&self.run);
        }
    }
}

fn mac_str(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A fresh, empty run directory. Unix socket paths must stay under 108 bytes, hence the short
/// fallback when `TMPDIR` is long.
fn run_dir() -> io::Result<PathBuf> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "dta-rxe-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut dir = std::env::temp_dir().join(&name);
    if dir.as_os_str().len() > 80 {
        dir = Path::new("/tmp").join(&name);
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn read_pid(run: &Path) -> Option<u32> {
    fs::read_to_string(run.join("qemu.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Owns a running QEMU: dropping it (normally, or while unwinding from a panic) stops it.
struct QemuGuard(u32);

impl Drop for QemuGuard {
    fn drop(&mut self) {
        if alive(self.0) {
            stop_pid(self.0);
        }
    }
}

/// Stops QEMUs left behind by test processes that died without cleaning up, and removes their
/// run directories. A run directory `dta-rxe-<owner>-<n>` (in the temp directory or `/tmp`) is
/// stale when process `<owner>` no longer runs; its `qemu.pid` is stopped only if that process
/// is a QEMU (`/proc/<pid>/comm` starts with `qemu`), so a recycled pid is never killed.
/// Returns how many QEMUs were stopped.
pub fn reap_stale_runs() -> usize {
    let mut dirs = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    dirs.dedup();
    let mut stopped = 0;
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(owner) = name
                .to_str()
                .and_then(|n| n.strip_prefix("dta-rxe-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if owner == std::process::id() || alive(owner) {
                continue;
            }
            let run = e.path();
            if let Some(pid) = read_pid(&run) {
                let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if alive(pid) && comm.starts_with("qemu") {
                    stop_pid(pid);
                    stopped += 1;
                }
            }
            let _ = fs::remove_dir_all(&run);
        }
    }
    stopped
}

/// Whether process `pid` runs (a zombie counts as gone).
pub fn process_alive(pid: u32) -> bool {
    alive(pid)
}

/// Whether `pid` still runs. A zombie counts as gone: QEMU is not our child, and how soon init
/// reaps it is not ours to wait for.
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Stops the QEMU we started (TERM, then KILL after 5 s). It is not our child (QEMU
/// daemonizes), so init reaps it.
fn stop_pid(pid: u32) {
    let kill = |sig: &str| {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    };
    kill("-TERM");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(pid) {
        kill("-KILL");
    }
}

/// A shell that stops QEMU and removes the run directory if this process dies without dropping
/// its [`Vm`] (a harness timeout, SIGKILL), so no orphaned VM keeps a core busy. It runs in its
/// own process group, so a signal to the test's whole group (how harnesses and `timeout -s`
/// stop a job) does not take it along. Dropping it ends the shell.
struct Watchdog(Option<Child>);

impl Watchdog {
    fn spawn(run: &Path) -> Watchdog {
        let owner = std::process::id();
        let run = run.display();
        // The pause after our death lets a QEMU that was just starting write its pid file.
        let script = format!(
            "while kill -0 {owner} 2>/dev/null; do sleep 1; done; sleep 1; \
             p=$(cat '{run}/qemu.pid' 2>/dev/null) && kill $p 2>/dev/null; rm -rf '{run}'"
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        Watchdog(child)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ready_line() {
        let line =
            "RXE_TARGET_READY dev=rxe0 port=1 gid_index=1 gid=::ffff:10.77.0.2 qpn=0x000011 \
                    rq_psn=0x001000 sq_psn=0x002000 peer_qpn=0x000100 peer_gid=::ffff:10.77.0.1 \
                    rkey=0x00001234 lkey=0x00001234 vaddr=0x000055d0c0a3e000 len=4096 mtu=1024 \
                    pkey=0xffff";
        let t = Target::parse_ready(line).unwrap();
        assert_eq!(t.qpn, 0x11);
        assert_eq!(t.peer_qpn, 0x100);
        assert_eq!((t.rq_psn, t.sq_psn), (0x1000, 0x2000));
        assert_eq!(t.rkey, 0x1234);
        assert_eq!(t.vaddr, 0x55d0_c0a3_e000);
        assert_eq!((t.len, t.mtu, t.gid_index), (4096, 1024, 1));
        assert_eq!(t.gid, GUEST_IP.to_ipv6_mapped());
        assert_eq!(t.peer_gid, HOST_IP.to_ipv6_mapped());
        assert_eq!(t.dev, "rxe0");
        assert!(Target::parse_ready("RXE_TARGET_READY qpn=0x11").is_err());
        assert!(Target::parse_ready("DUMP off=0x0").is_err());
    }

    #[test]
    fn parses_counters() {
        let out = "link rxe0/1 sent_pkts 14 rcvd_pkts 16 duplicate_request 1 out_of_seq_request 1 \
                   rcvd_rnr_err 0\n";
        let c = parse_counters(out);
        assert_eq!(c["sent_pkts"], 14);
        assert_eq!(c["rcvd_pkts"], 16);
        assert_eq!(c["rcvd_rnr_err"], 0);
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn reaps_the_qemu_of_a_dead_test_process_only() {
        // A stand-in QEMU: `sleep` copied under a name starting with "qemu".
        let dir = std::env::temp_dir().join(format!("dta-reap-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("qemu-system-x86_64");
        fs::copy("/bin/sleep", &fake).unwrap();
        let mut qemu = Command::new(&fake).arg("60").spawn().unwrap();
        let mut innocent = Command::new("/bin/sleep").arg("60").spawn().unwrap();
        // An owner that has exited, and one that runs (us).
        let mut gone = Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let stale = std::env::temp_dir().join(format!("dta-rxe-{}-7", gone.id()));
        let stale2 = std::env::temp_dir().join(format!("dta-rxe-{}-8", gone.id()));
        let live = std::env::temp_dir().join(format!("dta-rxe-{}-999", std::process::id()));
        for (d, pid) in [
            (&stale, qemu.id()),
            (&stale2, innocent.id()),
            (&live, qemu.id()),
        ] {
            fs::create_dir_all(d).unwrap();
            fs::write(d.join("qemu.pid"), format!("{pid}\n")).unwrap();
        }
        let stopped = reap_stale_runs();
        let qemu_status = qemu.try_wait().unwrap();
        let innocent_status = innocent.try_wait().unwrap();
        let _ = innocent.kill();
        let _ = innocent.wait();
        let _ = qemu.kill();
        let _ = qemu.wait();
        let live_kept = live.exists();
        let _ = fs::remove_dir_all(&live);
        let _ = fs::remove_dir_all(&dir);
        assert!(stopped >= 1);
        assert!(qemu_status.is_some(), "the stale QEMU was stopped");
        assert!(innocent_status.is_none(), "a non-QEMU pid is never killed");
        assert!(
            !stale.exists() && !stale2.exists(),
            "stale run directories removed"
        );
        assert!(live_kept, "a live owner's run directory is left alone");
    }

    #[test]
    fn parses_hex() {
        assert_eq!(parse_hex("00ff10"), Some(vec![0, 0xff, 0x10]));
        assert_eq!(parse_hex("0"), None);
        assert_eq!(parse_hex("zz"), None);
    }

    #[test]
    fn answers_arp_for_host_only() {
        let mut req = Vec::new();
        req.extend_from_slice(&[0xff; 6]);
        req.extend_from_slice(&GUEST_MAC);
        req.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        req.extend_from_slice(&GUEST_MAC);
        req.extend_from_slice(&GUEST_IP.octets());
        req.extend_from_slice(&[0; 6]);
        req.extend_from_slice(&HOST_IP.octets());
        let rep = arp_reply(&req).unwrap();
        assert_eq!(&rep[0..6], &GUEST_MAC);
        assert_eq!(&rep[20..22], &[0, 2]);
        assert_eq!(&rep[22..28], &HOST_MAC);
        assert_eq!(&rep[28..32], &HOST_IP.octets());
        assert_eq!(&rep[32..38], &GUEST_MAC);
        assert_eq!(&rep[38..42], &GUEST_IP.octets());
        req[41] = 9;
        assert!(arp_reply(&req).is_none());
    }
}
