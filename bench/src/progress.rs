//! Progress of long runs: a live bar when stderr is a terminal, plain lines at an interval
//! when it is not (logs, CI), so redirected output stays readable.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Progress over `total` items.
pub struct Progress {
    bar: Option<ProgressBar>,
    what: &'static str,
    total: u64,
    t0: Instant,
    last: Instant,
    every: Duration,
}

impl Progress {
    /// Starts a progress display for `total` `what` (e.g. "reports"); a plain line at most
    /// every `every` when stderr is not a terminal.
    pub fn new(total: u64, what: &'static str, every: Duration) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "  [{bar:30}] {pos:>10}/{len} {msg} ({per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
            b.set_style(style);
            b.set_message(what);
            b
        });
        let now = Instant::now();
        Progress {
            bar,
            what,
            total,
            t0: now,
            last: now,
            every,
        }
    }

    /// Whether a line is due (always true with a bar: it rate-limits itself).
    pub fn due(&self) -> bool {
        self.bar.is_some() || self.last.elapsed() >= self.every
    }

    /// Sets the position to `done`, with `detail` (e.g. counters) after the count.
    pub fn set(&mut self, done: u64, detail: &str) {
        match &self.bar {
            Some(b) => {
                b.set_position(done);
                if !detail.is_empty() {
                    b.set_message(format!("{}  {detail}", self.what));
                }
            }
            None => {
                self.last = Instant::now();
                let rate = done as f64 / self.t0.elapsed().as_secs_f64().max(1e-9);
                eprintln!(
                    "  {done:>10}/{} {}  {detail}  ({rate:.0}/s)",
                    self.total, self.what
                );
            }
        }
    }

    /// Ends the display (clears the bar; nothing for plain lines).
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
