//! The `dta ingest` child process as this benchmark drives it: spawned against one database,
//! its progress read from its standard output, finished with `FINISH <n>`.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::ingest::{Db, IngestStats};

/// The `dta ingest` process, driven over its standard input and output.
pub struct IngestChild {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Where it receives reports.
    pub addr: SocketAddrV4,
    received: Arc<AtomicU64>,
    done: mpsc::Receiver<Result<IngestStats, String>>,
}

impl IngestChild {
    /// Starts `exe ingest` for `db` at `server`, and waits until it listens.
    pub fn spawn(exe: &Path, db: Db, server: &str, database: &str) -> Result<IngestChild, String> {
        let mut child = Command::new(exe)
            .args(["ingest", "--db", db.name(), "--server", server])
            .args(["--database", database])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let received = Arc::new(AtomicU64::new(0));
        let (listen_tx, listen_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let rcv = received.clone();
        std::thread::spawn(move || {
            let mut done_tx = Some(done_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = line.strip_prefix("LISTEN ") {
                    let _ =
                        listen_tx.send(a.trim().parse::<SocketAddrV4>().map_err(|e| e.to_string()));
                } else if let Some(n) = line.strip_prefix("RECEIVED ") {
                    if let Ok(n) = n.trim().parse() {
                        rcv.store(n, Ordering::Relaxed);
                    }
                } else if let Some(j) = line.strip_prefix("DONE ") {
                    if let Some(tx) = done_tx.take() {
                        let _ = tx.send(serde_json::from_str(j).map_err(|e| e.to_string()));
                    }
                } else if let Some(e) = line.strip_prefix("ERROR ") {
                    if let Some(tx) = done_tx.take() {
                        let _ = tx.send(Err(e.to_string()));
                    }
                }
            }
            if let Some(tx) = done_tx {
                let _ = tx.send(Err("dta ingest exited without a result".into()));
            }
        });
        let stdin = child.stdin.take();
        let mut me = IngestChild {
            child,
            stdin,
            addr: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
            received,
            done,
        };
        me.addr = match listen_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(format!("dta ingest: {e}")),
            Err(_) => {
                return Err(match me.done.try_recv() {
                    Ok(Err(e)) => format!("dta ingest --db {}: {e}", db.name()),
                    _ => format!("dta ingest --db {} did not start listening", db.name()),
                })
            }
        };
        Ok(me)
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Datagrams it reported having received.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Tells it how many datagrams were sent and waits for its result (and its exit).
    pub fn finish(&mut self, sent: u64, timeout: Duration) -> Result<IngestStats, String> {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "FINISH {sent}");
            let _ = s.flush();
            // Dropping it closes its standard input too.
        }
        let r = self
            .done
            .recv_timeout(timeout)
            .map_err(|_| "dta ingest: no result in time".to_string())?;
        let _ = self.child.wait();
        r
    }
}

impl Drop for IngestChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
