//! pcap replay and capture: a [`Backend`] that needs no network at all.
//!
//! - [`PcapTrace`] holds a capture's Ethernet frames in one contiguous buffer, loaded once.
//! - [`PcapBackend`] replays a trace (shared by `Arc`, so several workers can replay the same
//!   one) N times or forever, at a set rate or as fast as possible, delivering only the UDP
//!   datagrams its [`FrameFilter`] accepts, with [`IpMeta`](dta_proto::batch::IpMeta) filled
//!   in. What it is asked to transmit goes to an optional [`PcapCapture`], or nowhere.
//! - [`PcapCapture`] writes frames (or whole [`TxBatch`]es) to a pcap file, standalone too.
//! - [`Pacer`] is the rate arithmetic, kept apart from the clock so it can be tested exactly.
//!
//! The replay loop makes no allocation and no syscall per packet: a burst is parsed in place
//! from the trace buffer; pacing reads the clock once per burst.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dta_proto::batch::{Datagram, TxBatch};
use pcap_file::pcap::{PcapHeader, PcapReader};
use pcap_file::DataLink;

use crate::backend::{Backend, BackendStats};
use crate::frame::{build_udp_frame, parse_udp_frame, FrameFilter, FrameStats};
use dta_proto::wire::ethernet::MacAddr;
use std::net::SocketAddrV4;

/// Largest burst one `recv_with` call delivers.
pub const MAX_BURST: usize = 64;

fn pcap_err(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

/// The Ethernet frames of a capture, in order, in one buffer.
#[derive(Debug, Clone, Default)]
pub struct PcapTrace {
    data: Vec<u8>,
    bounds: Vec<(usize, usize)>,
}

impl PcapTrace {
    /// A trace of the given frames (e.g. made by a generator in memory).
    pub fn from_frames<'a, I: IntoIterator<Item = &'a [u8]>>(frames: I) -> PcapTrace {
        let mut t = PcapTrace::default();
        for f in frames {
            t.push(f);
        }
        t
    }

    /// Parses a classic pcap file image (Ethernet link type only).
    pub fn from_pcap_bytes(bytes: &[u8]) -> io::Result<PcapTrace> {
        let mut r = PcapReader::new(bytes).map_err(pcap_err)?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("pcap link type {:?} is not Ethernet", r.header().datalink),
            ));
        }
        let mut t = PcapTrace::default();
        while let Some(p) = r.next_packet() {
            let p = p.map_err(pcap_err)?;
            t.push(&p.data);
        }
        Ok(t)
    }

    /// Reads a classic pcap file into memory.
    pub fn open(path: impl AsRef<Path>) -> io::Result<PcapTrace> {
        let bytes = std::fs::read(path)?;
        PcapTrace::from_pcap_bytes(&bytes)
    }

    /// Appends one frame.
    pub fn push(&mut self, frame: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(frame);
        self.bounds.push((start, frame.len()));
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.bounds.len()
    }

    /// True if the trace holds no frame.
    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty()
    }

    /// The `i`-th frame.
    #[inline]
    pub fn frame(&self, i: usize) -> &[u8] {
        let (s, n) = self.bounds[i];
        &self.data[s..s + n]
    }

    /// Total bytes of all frames.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// Constant-rate pacing: packet `n` (counting from 0) is due `n / rate` seconds after the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacer {
    rate: f64,
}

impl Pacer {
    /// A pacer for `rate` packets per second; `None` for a zero, negative or non-finite rate.
    pub fn new(rate: f64) -> Option<Pacer> {
        (rate.is_finite() && rate > 0.0).then_some(Pacer { rate })
    }

    /// Packets per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// How many packets in total are due once `elapsed` has passed since the start (packet 0
    /// is due at once, so this is at least 1).
    #[inline]
    pub fn due_by(&self, elapsed: Duration) -> u64 {
        let n = (elapsed.as_secs_f64() * self.rate).floor();
        if n >= u64::MAX as f64 {
            u64::MAX
        } else {
            n as u64 + 1
        }
    }

    /// When packet `n` is due, as an offset from the start.
    #[inline]
    pub fn due_at(&self, n: u64) -> Duration {
        Duration::from_secs_f64(n as f64 / self.rate)
    }

    /// How many packets may go now if `released` already went.
    #[inline]
    pub fn budget(&self, elapsed: Duration, released: u64) -> u64 {
        self.due_by(elapsed).saturating_sub(released)
    }
}

/// How a [`PcapBackend`] replays its trace.
#[derive(Debug, Clone, Copy)]
pub struct ReplayConfig {
    /// Passes over the trace; `None` loops forever.
    pub loops: Option<u64>,
    /// Frames per second (counting every frame of the trace, delivered or not); `None` goes
    /// as fast as the consumer takes them.
    pub rate: Option<f64>,
    /// Frames read per `recv_with` call (1..=[`MAX_BURST`]).
    pub burst: usize,
    /// Which datagrams are delivered.
    pub filter: FrameFilter,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            loops: Some(1),
            rate: None,
            burst: 32,
            filter: FrameFilter::default(),
        }
    }
}

/// Writes frames to a classic pcap file (Ethernet link type, microsecond timestamps,
/// little-endian). The global header comes from `pcap-file`; each record header is 16 bytes
/// written here, so the writer stays ours to flush.
pub struct PcapCapture<W: Write> {
    w: W,
    frames: u64,
    wrap: Option<(MacAddr, SocketAddrV4)>,
    scratch: Vec<u8>,
}

/// Snap length written in the header; longer frames are truncated in the file.
pub const SNAPLEN: u32 = 65535;

impl PcapCapture<BufWriter<File>> {
    /// Creates `path` anew, readable by its owner only ([`crate::private_file::create`]: a
    /// capture of RoCEv2 frames holds R_Keys, addresses and PSNs).
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        PcapCapture::new(BufWriter::with_capacity(
            1 << 20,
            crate::private_file::create(path.as_ref())?,
        ))
    }
}

impl<W: Write> PcapCapture<W> {
    /// Writes the pcap header to `w`.
    pub fn new(mut w: W) -> io::Result<Self> {
        let header = PcapHeader {
            endianness: pcap_file::Endianness::Little,
            snaplen: SNAPLEN,
            ..PcapHeader::default()
        };
        header.write_to(&mut w).map_err(pcap_err)?;
        Ok(PcapCapture {
            w,
            frames: 0,
            wrap: None,
            scratch: Vec::new(),
        })
    }

    /// Also records bare UDP payloads: a batch frame whose socket part is the whole frame
    /// (pushed with offset 0, as a producer for the kernel UDP backend writes NACKs) is
    /// wrapped in Ethernet/IPv4/UDP headers from `src` (MAC and address) to the frame's
    /// destination (MAC zero, IPv4 ident 0 and DF, as the kernel would send it, UDP checksum
    /// 0). Without this, such frames are written as they are.
    pub fn wrap_payloads_from(mut self, src_mac: MacAddr, src: SocketAddrV4) -> Self {
        self.wrap = Some((src_mac, src));
        self.scratch = vec![0; u16::MAX as usize + 64];
        self
    }

    /// Writes one frame stamped `ts` (time since the Unix epoch).
    pub fn write_frame(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        let orig = frame.len().min(u32::MAX as usize) as u32;
        let incl = orig.min(SNAPLEN);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&incl.to_le_bytes());
        rec[12..16].copy_from_slice(&orig.to_le_bytes());
        self.w.write_all(&rec)?;
        self.w.write_all(&frame[..incl as usize])?;
        self.frames += 1;
        Ok(())
    }

    /// Writes every frame of `batch` (in full: the frames must be Ethernet frames) with one
    /// timestamp, now. Returns the number written.
    pub fn write_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for i in 0..batch.len() {
            let frame = batch.frame(i);
            match self.wrap {
                Some((mac, src)) if batch.payload(i).len() == frame.len() => {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let n = build_udp_frame(
                        mac,
                        MacAddr::ZERO,
                        src,
                        batch.dest(i),
                        0,
                        frame,
                        false,
                        &mut scratch,
                    );
                    let r = self.write_frame(ts, &scratch[..n]);
                    self.scratch = scratch;
                    r?;
                }
                _ => self.write_frame(ts, frame)?,
            }
        }
        Ok(batch.len())
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes buffered frames.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// Flushes and returns the writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.flush()?;
        Ok(self.w)
    }
}

/// Replays a [`PcapTrace`] as received traffic and captures what is transmitted.
pub struct PcapBackend {
    trace: Arc<PcapTrace>,
    cfg: ReplayConfig,
    pacer: Option<Pacer>,
    pos: usize,
    loops_done: u64,
    released: u64,
    start: Option<Instant>,
    capture: Option<PcapCapture<Box<dyn Write + Send>>>,
    stats: BackendStats,
    drops: FrameStats,
}

impl PcapBackend {
    /// Replays `trace` as `cfg` says; transmitted frames are counted and discarded.
    pub fn new(trace: Arc<PcapTrace>, cfg: ReplayConfig) -> PcapBackend {
        let cfg = ReplayConfig {
            burst: cfg.burst.clamp(1, MAX_BURST),
            ..cfg
        };
        PcapBackend {
            pacer: cfg.rate.and_then(Pacer::new),
            trace,
            cfg,
            pos: 0,
            loops_done: 0,
            released: 0,
            start: None,
            capture: None,
            stats: BackendStats::default(),
            drops: FrameStats::default(),
        }
    }

    /// Also writes every transmitted frame to `capture`.
    pub fn with_capture(mut self, capture: PcapCapture<Box<dyn Write + Send>>) -> PcapBackend {
        self.capture = Some(capture);
        self
    }

    /// Opens `path` as the capture of transmitted frames (mode 0600, see [`capture_file`]).
    pub fn capture_to(self, path: impl AsRef<Path>) -> io::Result<PcapBackend> {
        let w: Box<dyn Write + Send> = Box::new(BufWriter::with_capacity(
            1 << 20,
            crate::private_file::create(path.as_ref())?,
        ));
        Ok(self.with_capture(PcapCapture::new(w)?))
    }

    /// True once every pass over the trace has been delivered.
    pub fn is_finished(&self) -> bool {
        self.trace.is_empty() || self.cfg.loops.is_some_and(|n| self.loops_done >= n)
    }

    /// Frames read from the trace so far (delivered or dropped).
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Frames dropped by reason.
    pub fn frame_stats(&self) -> FrameStats {
        self.drops
    }

    /// Flushes the capture, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.capture {
            Some(c) => c.flush(),
            None => Ok(()),
        }
    }

    /// Frames the next burst may read, waiting (at most `timeout`) for the pacer if needed.
    fn burst_budget(&mut self, timeout: Duration) -> usize {
        let want = self.cfg.burst;
        let Some(p) = self.pacer else {
            return want;
        };
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        let mut budget = p.budget(now - start, self.released);
        if budget == 0 {
            let wait = (start + p.due_at(self.released)).saturating_duration_since(now);
            std::thread::sleep(wait.min(timeout));
            budget = p.budget(Instant::now() - start, self.released);
        }
        budget.min(want as u64) as usize
    }
}

impl Backend for PcapBackend {
    fn name(&self) -> &'static str {
        "pcap"
    }

    fn l2_frames(&self) -> bool {
        true
    }

    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        if self.is_finished() {
            std::thread::sleep(timeout);
            return Ok(0);
        }
        let budget = self.burst_budget(timeout);
        let trace = Arc::clone(&self.trace);
        let empty = Datagram {
            src: std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            dst: std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            ip: None,
            payload: &[],
        };
        let mut burst = [empty; MAX_BURST];
        let mut k = 0;
        for _ in 0..budget {
            let frame = trace.frame(self.pos);
            self.pos += 1;
            self.released += 1;
            if self.pos == trace.len() {
                self.pos = 0;
                self.loops_done += 1;
            }
            match parse_udp_frame(frame, &self.cfg.filter) {
                Ok(d) => {
                    self.stats.rx_bytes += d.payload.len() as u64;
                    burst[k] = d;
                    k += 1;
                }
                Err(why) => {
                    self.drops.count(why);
                    self.stats.rx_dropped += 1;
                }
            }
            if self.is_finished() {
                break;
            }
        }
        if k > 0 {
            self.stats.rx_packets += k as u64;
            self.stats.rx_ios += 1;
            f(&burst[..k]);
        }
        Ok(k)
    }

    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        self.stats.tx_ios += 1;
        if let Some(c) = &mut self.capture {
            if let Err(e) = c.write_batch(batch) {
                self.stats.tx_errors += batch.len() as u64;
                return Err(e);
            }
        }
        for i in 0..batch.len() {
            self.stats.tx_bytes += batch.frame(i).len() as u64;
        }
        self.stats.tx_packets += batch.len() as u64;
        Ok(batch.len())
    }

    fn stats(&self) -> BackendStats {
        self.stats
    }
}

impl Drop for PcapBackend {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Any backend with a capture of what it transmits: every [`TxBatch`] is written to a
/// [`PcapCapture`] and then handed to the inner backend unchanged.
///
/// For a kernel UDP inner backend, build the capture with
/// [`PcapCapture::wrap_payloads_from`], so bare payloads (pushed with offset 0) are written as
/// complete Ethernet/IPv4/UDP frames; frames already pushed whole are written as they are.
/// For raw backends, do not wrap: their frames are complete, and their offsets are 0.
///
/// A capture write error (disk full, ...) stops the capture and is counted in
/// [`capture_errors`](Self::capture_errors); transmission goes on.
pub struct CaptureBackend {
    inner: Box<dyn Backend>,
    capture: Option<PcapCapture<Box<dyn Write + Send>>>,
    captured: u64,
    capture_errors: u64,
}

impl CaptureBackend {
    /// Tees `inner`'s transmissions into `capture`.
    pub fn new(
        inner: Box<dyn Backend>,
        capture: PcapCapture<Box<dyn Write + Send>>,
    ) -> CaptureBackend {
        CaptureBackend {
            inner,
            capture: Some(capture),
            captured: 0,
            capture_errors: 0,
        }
    }

    /// Frames written to the capture so far.
    pub fn captured(&self) -> u64 {
        self.captured
    }

    /// Capture write failures (after the first, the capture is closed).
    pub fn capture_errors(&self) -> u64 {
        self.capture_errors
    }

    /// Flushes the capture.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.capture {
            Some(c) => c.flush(),
            None => Ok(()),
        }
    }
}

/// Opens a capture file for [`CaptureBackend`] (buffered, header written), created anew with
/// mode 0600 ([`crate::private_file::create`]): it will hold R_Keys, addresses and PSNs.
pub fn capture_file(path: impl AsRef<Path>) -> io::Result<PcapCapture<Box<dyn Write + Send>>> {
    let w: Box<dyn Write + Send> = Box::new(BufWriter::with_capacity(
        1 << 20,
        crate::private_file::create(path.as_ref())?,
    ));
    PcapCapture::new(w)
}

impl Backend for CaptureBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn l2_frames(&self) -> bool {
        self.inner.l2_frames()
    }

    fn recv_with(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(&[Datagram<'_>]),
    ) -> io::Result<usize> {
        self.inner.recv_with(timeout, f)
    }

    fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        if let Some(c) = &mut self.capture {
            match c.write_batch(batch) {
                Ok(n) => self.captured += n as u64,
                Err(e) => {
                    log::warn!("capture stopped: {e}");
                    self.capture_errors += 1;
                    self.capture = None;
                }
            }
        }
        self.inner.send_batch(batch)
    }

    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }

    /// Forwarded to the wrapped backend (the capture records frames as the producer wrote
    /// them, before the backend sets their destination MAC).
    fn answer_to_sender_mac(&mut self, on: bool) -> bool {
        self.inner.answer_to_sender_mac(on)
    }
}

impl Drop for CaptureBackend {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::warn!("capture flush failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Issue 28: captures of transmitted frames hold R_Keys, addresses and PSNs: every way of
    /// opening one makes a file only its owner can read, also when the path exists already
    /// with a wider mode (the umask of the test process is the usual 022).
    #[test]
    fn captures_are_created_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("dta-pcap-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let (a, b, c) = (dir.join("a.pcap"), dir.join("b.pcap"), dir.join("c.pcap"));
        // c exists already, readable by everyone, with old contents.
        std::fs::write(&c, b"old capture").unwrap();
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(PcapCapture::create(&a).unwrap());
        drop(capture_file(&b).unwrap());
        let mut cap = capture_file(&c).unwrap();
        cap.flush().unwrap();
        for p in [&a, &b, &c] {
            assert_eq!(mode(p), 0o600, "{} is mode {:03o}", p.display(), mode(p));
        }
        assert_eq!(
            std::fs::metadata(&c).unwrap().len(),
            24,
            "truncated: header only"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn udp(dport: u16, tag: u8, ident: u16) -> Vec<u8> {
        let mut out = vec![0; 256];
        let n = build_udp_frame(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 5000),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), dport),
            ident,
            &[tag; 20],
            true,
            &mut out,
        );
        out.truncate(n);
        out
    }

    /// A trace of 10 frames: 6 reports to 40000, 2 RoCEv2 to 4791, one to 53 and one ARP.
    fn mixed_trace() -> PcapTrace {
        let mut frames = Vec::new();
        for i in 0..6u8 {
            frames.push(udp(40000, i, 100 + i as u16));
        }
        frames.push(udp(4791, 6, 0));
        frames.push(udp(53, 7, 0));
        let mut arp = udp(40000, 8, 0);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        frames.push(arp);
        frames.push(udp(4791, 9, 0));
        PcapTrace::from_frames(frames.iter().map(|f| &f[..]))
    }

    fn drain(b: &mut PcapBackend) -> Vec<(u16, u8, u16)> {
        let mut got = Vec::new();
        let mut idle = 0;
        while !b.is_finished() && idle < 100 {
            let n = b
                .recv_with(Duration::from_millis(1), &mut |burst| {
                    for d in burst {
                        got.push((d.dst.port(), d.payload[0], d.ip.unwrap().ident));
                    }
                })
                .unwrap();
            idle = if n == 0 { idle + 1 } else { 0 };
        }
        got
    }

    #[test]
    fn replay_from_pcap_file_bytes_with_filter_and_loops() {
        let trace = mixed_trace();
        let mut cap = PcapCapture::new(Vec::new()).unwrap();
        for i in 0..trace.len() {
            cap.write_frame(Duration::from_micros(i as u64), trace.frame(i))
                .unwrap();
        }
        let bytes = cap.into_inner().unwrap();
        let back = PcapTrace::from_pcap_bytes(&bytes).unwrap();
        assert_eq!(back.len(), 10);
        for i in 0..10 {
            assert_eq!(back.frame(i), trace.frame(i));
        }
        let cfg = ReplayConfig {
            loops: Some(3),
            burst: 4,
            filter: FrameFilter::ports(&[40000, 4791]).unwrap(),
            ..ReplayConfig::default()
        };
        let mut b = PcapBackend::new(Arc::new(back), cfg);
        let got = drain(&mut b);
        assert_eq!(got.len(), 3 * 8);
        assert_eq!(got[0], (40000, 0, 100));
        assert_eq!(got[5], (40000, 5, 105));
        assert_eq!(got[6], (4791, 6, 0));
        assert_eq!(got[7], (4791, 9, 0));
        assert_eq!(got[8], (40000, 0, 100));
        let d = b.frame_stats();
        assert_eq!((d.filtered, d.not_ipv4), (3, 3));
        let s = b.stats();
        assert_eq!((s.rx_packets, s.rx_dropped), (24, 6));
        assert!(s.rx_ios < s.rx_packets, "bursts: {s:?}");
        assert_eq!(b.released(), 30);
        // Finished: further calls deliver nothing.
        assert_eq!(b.recv_with(Duration::ZERO, &mut |_| {}).unwrap(), 0);
    }

    #[test]
    fn endless_replay_keeps_going() {
        let mut b = PcapBackend::new(
            Arc::new(mixed_trace()),
            ReplayConfig {
                loops: None,
                burst: 64,
                ..ReplayConfig::default()
            },
        );
        let mut n = 0;
        for _ in 0..100 {
            n += b.recv_with(Duration::ZERO, &mut |_| {}).unwrap();
        }
        assert!(!b.is_finished());
        // 100 bursts of 64 frames; everything but the ARP frame is UDP: 9 of every 10.
        assert_eq!(b.released(), 6400);
        assert_eq!(n, 5760);
    }

    #[test]
    fn capture_round_trip_through_a_file() {
        let dir = std::env::temp_dir().join(format!("dta-io-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tx.pcap");
        let trace = Arc::new(mixed_trace());
        let mut b = PcapBackend::new(trace.clone(), ReplayConfig::default())
            .capture_to(&path)
            .unwrap();
        let mut batch = TxBatch::new(16, 256);
        for i in 0..5 {
            let f = trace.frame(i);
            let dest = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 40000);
            assert!(batch.push_with(dest, 42, |buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            }));
        }
        assert_eq!(b.send_batch(&batch).unwrap(), 5);
        assert_eq!(b.send_batch(&batch).unwrap(), 5);
        let s = b.stats();
        assert_eq!((s.tx_packets, s.tx_ios), (10, 2));
        drop(b);
        let back = PcapTrace::open(&path).unwrap();
        assert_eq!(back.len(), 10);
        for i in 0..10 {
            assert_eq!(back.frame(i), trace.frame(i % 5));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn capture_backend_tees_transmissions_and_passes_receive_through() {
        let dir = std::env::temp_dir().join(format!("dta-io-tee-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tee.pcap");
        let trace = Arc::new(mixed_trace());
        let inner = PcapBackend::new(
            trace.clone(),
            ReplayConfig {
                loops: Some(1),
                burst: 64,
                ..ReplayConfig::default()
            },
        );
        let mut b = CaptureBackend::new(Box::new(inner), capture_file(&path).unwrap());
        assert_eq!((b.name(), b.l2_frames()), ("pcap", true));
        // Receive goes to the inner backend: 9 UDP frames of the 10.
        assert_eq!(b.recv_with(Duration::ZERO, &mut |_| {}).unwrap(), 9);
        let mut batch = TxBatch::new(8, 256);
        for i in 0..3 {
            let f = trace.frame(i);
            assert!(
                batch.push_with(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1), 0, |buf| {
                    buf[..f.len()].copy_from_slice(f);
                    f.len()
                })
            );
        }
        assert_eq!(b.send_batch(&batch).unwrap(), 3);
        assert_eq!(b.send_batch(&batch).unwrap(), 3);
        assert_eq!(b.captured(), 6);
        assert_eq!(b.capture_errors(), 0);
        // The inner backend still transmitted (counted) everything.
        assert_eq!(b.stats().tx_packets, 6);
        drop(b);
        let back = PcapTrace::open(&path).unwrap();
        assert_eq!(back.len(), 6);
        for i in 0..6 {
            assert_eq!(back.frame(i), trace.frame(i % 3));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn capture_wraps_bare_payloads_when_asked() {
        let src = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 4791);
        let dest = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 40001);
        let mut batch = TxBatch::new(4, 256);
        // A bare payload (offset 0) and a whole frame (offset 42).
        assert!(batch.push_with(dest, 0, |b| {
            b[..4].copy_from_slice(b"nack");
            4
        }));
        let whole = udp(4791, 3, 77);
        assert!(batch.push_with(dest, 42, |b| {
            b[..whole.len()].copy_from_slice(&whole);
            whole.len()
        }));
        let mut cap = PcapCapture::new(Vec::new())
            .unwrap()
            .wrap_payloads_from(MacAddr([2, 0, 0, 0, 0, 9]), src);
        assert_eq!(cap.write_batch(&batch).unwrap(), 2);
        let t = PcapTrace::from_pcap_bytes(&cap.into_inner().unwrap()).unwrap();
        assert_eq!(t.len(), 2);
        let d = parse_udp_frame(t.frame(0), &FrameFilter::default()).unwrap();
        assert_eq!((d.src, d.dst, d.payload), (src, dest, &b"nack"[..]));
        assert!(d.ip.unwrap().dont_frag);
        assert_eq!(t.frame(1), &whole[..]);
        // Without wrapping the payload is written as it is.
        let mut raw = PcapCapture::new(Vec::new()).unwrap();
        raw.write_batch(&batch).unwrap();
        let t = PcapTrace::from_pcap_bytes(&raw.into_inner().unwrap()).unwrap();
        assert_eq!(t.frame(0), b"nack");
    }

    #[test]
    fn non_ethernet_and_garbage_files_are_refused() {
        assert!(PcapTrace::from_pcap_bytes(b"not a pcap at all").is_err());
        let header = PcapHeader {
            datalink: DataLink::RAW,
            ..PcapHeader::default()
        };
        let mut w = Vec::new();
        header.write_to(&mut w).unwrap();
        assert!(PcapTrace::from_pcap_bytes(&w).is_err());
    }

    #[test]
    fn pacing_arithmetic() {
        assert!(Pacer::new(0.0).is_none());
        assert!(Pacer::new(-1.0).is_none());
        assert!(Pacer::new(f64::NAN).is_none());
        let p = Pacer::new(1000.0).unwrap();
        assert_eq!(p.due_by(Duration::ZERO), 1);
        assert_eq!(p.due_by(Duration::from_micros(999)), 1);
        assert_eq!(p.due_by(Duration::from_millis(1)), 2);
        assert_eq!(p.due_by(Duration::from_secs(1)), 1001);
        assert_eq!(p.due_at(0), Duration::ZERO);
        assert_eq!(p.due_at(500), Duration::from_millis(500));
        assert_eq!(p.budget(Duration::from_millis(10), 5), 6);
        assert_eq!(p.budget(Duration::from_millis(10), 20), 0);
        // Over any window the pacer releases rate × window (± 1) packets.
        let q = Pacer::new(2_500_000.0).unwrap();
        for ms in [1u64, 7, 100, 1000, 60_000] {
            let n = q.due_by(Duration::from_millis(ms));
            let ideal = 2_500 * ms;
            assert!(n.abs_diff(ideal) <= 1, "{ms} ms: {n} vs {ideal}");
            // due_at inverts due_by: packet n-1 is due no later than the window's end.
            assert!(q.due_at(n - 1) <= Duration::from_millis(ms));
            assert!(q.due_at(n) > Duration::from_millis(ms) - Duration::from_nanos(1));
        }
        let slow = Pacer::new(0.5).unwrap();
        assert_eq!(slow.due_at(1), Duration::from_secs(2));
        assert_eq!(slow.due_by(Duration::from_millis(1999)), 1);
    }

    #[test]
    fn paced_replay_does_not_outrun_the_rate() {
        // 100 packets/s: right after the start only the first packet is due.
        let mut b = PcapBackend::new(
            Arc::new(mixed_trace()),
            ReplayConfig {
                loops: None,
                rate: Some(100.0),
                burst: 64,
                ..ReplayConfig::default()
            },
        );
        b.recv_with(Duration::ZERO, &mut |_| {}).unwrap();
        assert!(b.released() <= 2, "released {}", b.released());
    }
}
