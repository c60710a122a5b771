//! A veth pair between two network namespaces, made by `scripts/netns.sh`, for smoke tests
//! that need root. Every helper returns `None` (after printing `SKIP: reason`) when the
//! topology cannot be made.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

pub fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns.sh")
}

/// The pair; removed on drop.
pub struct Topology {
    pub vars: HashMap<String, String>,
    env: Vec<(String, String)>,
}

impl Topology {
    /// Creates namespaces and veths named after `tag` (≤ 6 characters) and the process id.
    pub fn up(tag: &str, neigh: bool) -> Option<Topology> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip("not root: the veth/netns topology needs CAP_NET_ADMIN");
            return None;
        }
        let id = std::process::id() % 100_000;
        let env: Vec<(String, String)> = vec![
            ("NS_A".into(), format!("{tag}{id}a")),
            ("NS_B".into(), format!("{tag}{id}b")),
            ("IF_A".into(), format!("{tag}{id}a")),
            ("IF_B".into(), format!("{tag}{id}b")),
            ("NEIGH".into(), if neigh { "1" } else { "0" }.into()),
        ];
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(l) = text.lines().find(|l| l.starts_with("SKIP")) {
            skip(l.trim_start_matches("SKIP: "));
            return None;
        }
        let vars: HashMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !vars.contains_key("IF_B") {
            skip(&format!("netns.sh gave no topology: {text}"));
            return None;
        }
        Some(Topology { vars, env })
    }

    pub fn get(&self, k: &str) -> &str {
        &self.vars[k]
    }

    pub fn addr(&self, k: &str) -> Ipv4Addr {
        self.get(k).parse().unwrap()
    }

    pub fn mac(&self, k: &str) -> [u8; 6] {
        let mut m = [0u8; 6];
        for (i, p) in self.get(k).split(':').enumerate() {
            m[i] = u8::from_str_radix(p, 16).unwrap();
        }
        m
    }

    /// True if frames between the namespaces carry complete UDP checksums (netns.sh turned
    /// TX checksum offload off). False means partial checksums: a raw backend that verifies
    /// them drops every frame a kernel socket sent (as `FrameStats::bad_checksum`).
    pub fn checksums_complete(&self) -> bool {
        self.vars.get("CSUM").map(String::as_str) == Some("complete")
    }

    /// `ip -n NS neigh show ADDR` in the sender's namespace.
    pub fn neigh_of_b_in_a(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", self.get("NS_A"), "neigh", "show", self.get("ADDR_B")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output();
    }
}

/// Moves the calling thread into network namespace `ns` (made by `ip netns add`).
pub fn enter_netns(ns: &str) -> std::io::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Removes the runtime directory a DPDK process with `--file-prefix=prefix` leaves behind.
pub fn remove_dpdk_runtime(prefix: &str) {
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    if let Ok(x) = std::env::var("XDG_RUNTIME_DIR") {
        let _ = std::fs::remove_dir_all(format!("{x}/dpdk/{prefix}"));
    }
}
