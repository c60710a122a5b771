//! The two-namespace veth topology the raw-backend tests and benchmarks run on
//! (`scripts/netns.sh` with our own names), and entering a namespace from a thread.
//!
//! Creating it needs root and `ip`; [`Netns::up`] says why when it cannot, so a caller can
//! print SKIP with the reason.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Names and addresses of the veth topology (`scripts/netns.sh` with our own names).
pub struct Netns {
    env: Vec<(&'static str, String)>,
    /// Sender / collector side.
    pub ns_a: String,
    /// Backend side.
    pub ns_b: String,
    /// Backend-side interface.
    pub if_b: String,
    /// Sender / collector-side interface.
    pub if_a: String,
}

/// Sender / collector address.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Backend-side address.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// MAC of the sender / collector veth.
pub const MAC_A: &str = "02:00:00:77:00:01";
/// MAC of the backend veth.
pub const MAC_B: &str = "02:00:00:77:00:02";

fn netns_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns.sh")
}

impl Netns {
    /// Creates the topology with names starting with `prefix` (e.g. "dtr"). Err(reason) when
    /// it cannot (not root, no `ip`): the caller prints SKIP.
    ///
    /// `collector_rx_thread` runs veth A's receive (the software RNIC's side) in its own NAPI
    /// kernel thread. Otherwise veth delivers a frame in the context of the thread that sends
    /// it, so the translator's worker would pay for the collector's receive as well: work a
    /// real NIC does on the collector's host, not on the translator's.
    pub fn up(prefix: &str, collector_rx_thread: bool) -> Result<Netns, String> {
        let (ns_a, ns_b) = (format!("{prefix}-a"), format!("{prefix}-b"));
        let if_b = format!("{prefix}-vb");
        let if_a = format!("{prefix}-va");
        let env = vec![
            ("NS_A", ns_a.clone()),
            ("NS_B", ns_b.clone()),
            ("IF_A", if_a.clone()),
            ("IF_B", if_b.clone()),
            (
                "THREADED",
                if collector_rx_thread { "1" } else { "0" }.into(),
            ),
        ];
        let out = std::process::Command::new("bash")
            .arg(netns_script())
            .arg("up")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .map_err(|e| format!("cannot run scripts/netns.sh: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(l) = text.lines().find(|l| l.starts_with("SKIP")) {
            return Err(l.to_string());
        }
        if !text.lines().any(|l| l == "CSUM=complete") {
            // The raw backends verify UDP checksums; with offload on, the kernel sender's
            // datagrams carry partial ones and every frame would be dropped as bad.
            let net = Netns {
                env,
                ns_a,
                ns_b,
                if_b,
                if_a,
            };
            drop(net);
            return Err("SKIP: netns: TX checksum offload stays on (no ethtool; \
                        scripts/backend-deps.sh installs it): UDP checksums would be partial"
                .into());
        }
        // A freshly created veth pair takes a moment to carry traffic; a DPDK af_packet port
        // opened at once sometimes received nothing.
        std::thread::sleep(Duration::from_secs(1));
        Ok(Netns {
            env,
            ns_a,
            ns_b,
            if_b,
            if_a,
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(netns_script())
            .arg("down")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
    }
}

/// Moves the calling thread into the network namespace `/var/run/netns/NAME` (threads it
/// spawns afterwards inherit it). Needs CAP_SYS_ADMIN.
pub fn enter_netns(name: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))
        .map_err(|e| format!("netns {name}: {e}"))?;
    // SAFETY: setns on a valid, open namespace fd; it changes only this thread's namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(format!("setns {name}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}
