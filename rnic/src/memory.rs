//! Memory regions: the bytes reports land in.
//!
//! A [`Region`] is an `mmap`ed block, on hugepages when the system has them reserved (falling
//! back to ordinary pages with transparent-hugepage advice), or on a file (hugetlbfs or tmpfs)
//! when the operator wants the data to survive a collector restart.
//!
//! The same bytes are written by the software RNIC's thread (or, with a real RNIC, by DMA) and
//! read by query threads at the same time. All access from Rust therefore goes through relaxed
//! atomics of one size, 8 bytes, on aligned words ("atomic memcpy"; a partial word is merged
//! with compare-and-exchange), which is sound under concurrent writers, never tears an aligned
//! 8-byte word, and never mixes access sizes on the same bytes (which the Rust memory model
//! does not define). Ordering between a payload and the word that publishes
//! it (the Append trailer) is provided by [`Region::store_u64_release`] and
//! [`Region::load_u64_acquire`].
//!
//! Every access is bounds-checked and returns [`OutOfBounds`] instead of touching memory
//! outside the region.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Size of the huge pages we ask for (x86-64 default).
pub const HUGE_PAGE: usize = 2 << 20;

/// An access outside the region, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

/// Where a region's pages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous `MAP_HUGETLB` pages.
    HugePages,
    /// Anonymous ordinary pages (with `MADV_HUGEPAGE`), used when no hugepages are reserved.
    Anonymous,
    /// A shared file mapping that outlives the process (hugetlbfs or tmpfs).
    File(PathBuf),
}

impl std::fmt::Display for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::HugePages => f.write_str("hugepages"),
            Backing::Anonymous => f.write_str("anonymous"),
            Backing::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// A block of memory that RDMA operations may target.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    backing: Backing,
}

// SAFETY: the mapping is owned by the Region and lives until Drop; all access goes through
// atomics (see the module docs), so sharing between threads cannot produce data races.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only exposes atomic, bounds-checked access.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` zeroed bytes, on hugepages if `prefer_huge` and the system has them.
    pub fn anonymous(len: usize, prefer_huge: bool) -> io::Result<Region> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        if prefer_huge {
            let map_len = round_up(len, HUGE_PAGE);
            // SAFETY: a fresh anonymous mapping; the kernel picks the address. We check for
            // MAP_FAILED before using the pointer.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_HUGETLB
                        | libc::MAP_POPULATE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Region {
                    ptr: NonNull::new(p as *mut u8).expect("mmap returned null"),
                    len,
                    map_len,
                    backing: Backing::HugePages,
                });
            }
            log::debug!(
                "no hugepages for a {len}-byte region ({}); using ordinary pages",
                io::Error::last_os_error()
            );
        }
        let map_len = round_up(len, page_size());
        // Transparent huge pages back only the 2 MiB-aligned stretches of a mapping, and mmap
        // returns page-aligned addresses: a region of a few MiB got huge pages (fewer TLB
        // misses for every RNIC write) or not by luck of placement. Reserve 2 MiB more,
        // start the region on a 2 MiB boundary, and give the slack back.
        let reserve = if map_len >= THP_SIZE {
            map_len + THP_SIZE
        } else {
            map_len
        };
        // SAFETY: as above, without MAP_HUGETLB. Not populated yet: the hugepage advice must
        // come before the first touch for the kernel to back the range with huge pages.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let head = if reserve > map_len {
            round_up(raw as usize, THP_SIZE) - raw as usize
        } else {
            0
        };
        let tail = reserve - map_len - head;
        // SAFETY: both ranges lie inside the fresh mapping `raw..raw + reserve` and outside
        // the region `raw + head..raw + head + map_len`; they are page aligned (head is a
        // difference of page-aligned addresses) and unmapping a zero-length range is skipped.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap(
                    (raw as *mut u8).add(head + map_len) as *mut libc::c_void,
                    tail,
                );
            }
        }
        // SAFETY: head <= reserve - map_len, so the region is inside the mapping.
        let p = unsafe { (raw as *mut u8).add(head) } as *mut libc::c_void;
        // SAFETY: advice on our own fresh mapping; failure is harmless and ignored.
        unsafe {
            libc::madvise(p, map_len, libc::MADV_HUGEPAGE);
        }
        // Populate now (as MAP_POPULATE would) so no RDMA write or query takes a page fault:
        // one zero store per page allocates it, as a (transparent) huge page where possible.
        let page = page_size();
        for off in (0..map_len).step_by(page) {
            // SAFETY: off < map_len, page aligned, inside the fresh mapping nobody else sees
            // yet; the store is atomic like every other access to region memory.
            unsafe { AtomicU64::from_ptr((p as *mut u8).add(off) as *mut u64) }
                .store(0, Ordering::Relaxed);
        }
        Ok(Region {
            ptr: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
            map_len,
            backing: Backing::Anonymous,
        })
    }

    /// Maps `len` bytes of the file at `path` (created if missing, never truncated if it is
    /// already large enough), shared, so the data outlives the process.
    pub fn file(path: &Path, len: usize) -> io::Result<Region> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        // A new file is the collector user's only (its contents are the telemetry the stores
        // hold); an existing one keeps the mode its owner gave it.
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let on_hugetlbfs = is_hugetlbfs(path);
        let map_len = round_up(len, if on_hugetlbfs { HUGE_PAGE } else { page_size() });
        if f.metadata()?.len() < map_len as u64 {
            f.set_len(map_len as u64)?;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a shared mapping of a file we opened read-write and sized to map_len.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            ptr: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
            map_len,
            backing: Backing::File(path.to_path_buf()),
        })
    }

    /// Registered length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never, by construction).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes actually mapped (rounded up to the page size).
    pub fn mapped_len(&self) -> usize {
        self.map_len
    }

    /// Where the pages come from.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// The virtual address of the first byte (what an RNIC advertises as the region's VA).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    #[inline]
    fn check(&self, off: u64, len: usize) -> Result<usize, OutOfBounds> {
        let off = usize::try_from(off).map_err(|_| OutOfBounds)?;
        let end = off.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len {
            return Err(OutOfBounds);
        }
        Ok(off)
    }

    /// Copies `data` into the region at `off`.
    ///
    /// Small enough to inline into the RNIC's per-packet path: the bounds check, then whole
    /// words stored in a loop when both the destination and the length are multiples of 8
    /// (every Key-Write slot and Append batch), [`atomic_copy_in`]'s merges otherwise.
    #[inline(always)]
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let off = self.check(off, data.len())?;
        // SAFETY: [off, off + len) is inside the region (checked above).
        let dst = unsafe { self.ptr.as_ptr().add(off) };
        if (dst as usize | data.len()) % 8 == 0 {
            // SAFETY: [dst, dst + len) is inside the region and made of whole aligned words.
            unsafe { atomic_copy_words(dst, data) };
        } else {
            // SAFETY: as above; the mapping is page aligned and page-rounded, so the 8-aligned
            // words containing [dst, dst + len) are mapped too.
            unsafe { atomic_copy_in(dst, data) };
        }
        Ok(())
    }

    /// Copies `out.len()` bytes at `off` out of the region.
    #[inline]
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), OutOfBounds> {
        let off = self.check(off, out.len())?;
        // SAFETY: as in `write`.
        unsafe { atomic_copy_out(self.ptr.as_ptr().add(off), out) };
        Ok(())
    }

    #[inline]
    fn word(&self, off: u64) -> Result<&AtomicU64, OutOfBounds> {
        let o = self.check(off, 8)?;
        if o % 8 != 0 || (self.ptr.as_ptr() as usize) % 8 != 0 {
            return Err(OutOfBounds);
        }
        // SAFETY: in bounds and 8-byte aligned (the mapping is page aligned); the word lives
        // as long as &self, and all accesses to it are atomic.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(o) as *mut u64) })
    }

    /// Reads a little-endian u64 at an 8-aligned offset.
    #[inline]
    pub fn load_u64(&self, off: u64) -> Result<u64, OutOfBounds> {
        Ok(u64::from_le(self.word(off)?.load(Ordering::Relaxed)))
    }

    /// Reads a little-endian u64 with acquire ordering (pairs with `store_u64_release`).
    #[inline]
    pub fn load_u64_acquire(&self, off: u64) -> Result<u64, OutOfBounds> {
        Ok(u64::from_le(self.word(off)?.load(Ordering::Acquire)))
    }

    /// Writes a little-endian u64 with release ordering: everything written before it is
    /// visible to a reader that acquires this word.
    #[inline]
    pub fn store_u64_release(&self, off: u64, v: u64) -> Result<(), OutOfBounds> {
        self.word(off)?.store(v.to_le(), Ordering::Release);
        Ok(())
    }

    /// Atomic fetch-and-add on a native-endian (little-endian) u64, as rxe does on x86.
    /// Returns the original value.
    #[inline]
    pub fn fetch_add(&self, off: u64, add: u64) -> Result<u64, OutOfBounds> {
        let w = self.word(off)?;
        Ok(u64::from_le(w.fetch_add(add.to_le(), Ordering::AcqRel)))
    }

    /// Atomic compare-and-swap on a little-endian u64. Returns the original value.
    #[inline]
    pub fn compare_swap(&self, off: u64, compare: u64, swap: u64) -> Result<u64, OutOfBounds> {
        let w = self.word(off)?;
        let r = w.compare_exchange(
            compare.to_le(),
            swap.to_le(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        Ok(u64::from_le(match r {
            Ok(v) | Err(v) => v,
        }))
    }

    /// Zeroes `[off, off + len)`.
    pub fn zero(&self, off: u64, len: usize) -> Result<(), OutOfBounds> {
        let off = self.check(off, len)?;
        const Z: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(Z.len());
            // SAFETY: [off + done, off + done + n) is inside [off, off + len), checked above.
            unsafe { atomic_copy_in(self.ptr.as_ptr().add(off + done), &Z[..n]) };
            done += n;
        }
        Ok(())
    }
}

/// Writes of one length into one region, with what a write of that length checks and
/// decides once (the last offset it may start at, whether it is whole words) done at
/// construction: a responder keeps one for the payload length its peer usually sends. Each
/// write is [`Region::write`] of the same bytes.
pub struct FixedWriter {
    region: Arc<Region>,
    /// The region's first byte (mapped as long as `region` lives).
    ptr: NonNull<u8>,
    len: usize,
    /// The last offset a write of `len` bytes may start at.
    last: u64,
    /// Nonzero unless `len` is a multiple of 8 (then every write merges).
    odd: usize,
    /// `len - 16` for whole-word lengths of 16 to 32 bytes (a Key-Write slot): four stores at
    /// 0, 8, `tail` and `tail + 8` cover them without a jump on the word count. Else
    /// `usize::MAX`.
    tail: usize,
}

// SAFETY: `ptr` is `region`'s mapping, which the writer keeps alive; access through it is as
// through `&Region` (atomic and bounds-checked), so the writer is as Send and Sync as Region.
unsafe impl Send for FixedWriter {}
// SAFETY: as above.
unsafe impl Sync for FixedWriter {}

impl FixedWriter {
    /// Writes of `len` bytes into `region`; `None` if `len` is zero or longer than the region.
    pub fn new(region: Arc<Region>, len: usize) -> Option<FixedWriter> {
        if len == 0 || len > region.len {
            return None;
        }
        Some(FixedWriter {
            ptr: region.ptr,
            last: (region.len - len) as u64,
            odd: len % 8,
            tail: if len % 8 == 0 && (16..=32).contains(&len) {
                len - 16
            } else {
                usize::MAX
            },
            len,
            region,
        })
    }

    /// The region written to.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// [`Region::write`]`(off, &data[..len])`, and `OutOfBounds` when `data` is shorter.
    #[inline(always)]
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let Some(src) = data.get(..self.len) else {
            return Err(OutOfBounds);
        };
        if off > self.last {
            return Err(OutOfBounds);
        }
        // SAFETY: off <= last = region.len - len, so [off, off + len) is inside the region.
        let dst = unsafe { self.ptr.as_ptr().add(off as usize) };
        if (dst as usize | self.odd) % 8 == 0 {
            if self.tail != usize::MAX {
                // SAFETY: [dst, dst + len) is inside the region and made of 2 to 4 whole
                // aligned words, the last two starting at `tail` = len - 16.
                unsafe { atomic_copy_2_to_4_words(dst, src, self.tail) };
            } else {
                // SAFETY: [dst, dst + len) is inside the region and made of whole aligned
                // words.
                unsafe { atomic_copy_words(dst, src) };
            }
        } else {
            // SAFETY: as in `Region::write`.
            unsafe { atomic_copy_in(dst, src) };
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; no reference into it outlives
        // &self (accessors hand out copies or atomics bound to &self).
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_len);
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("backing", &self.backing)
            .finish()
    }
}

/// Copies `src` to `dst` with relaxed atomic accesses of one size only, 8 bytes: whole words
/// are stored; a partial word at either end is merged into the aligned word that contains it
/// with a compare-and-exchange loop, so no byte outside `dst..dst + src.len()` changes.
///
/// Every access to region memory goes through an `AtomicU64` of an 8-aligned word: the Rust
/// memory model leaves racing atomic accesses of different sizes to the same bytes undefined
/// (the `std::sync::atomic` module docs, "Memory model for atomic accesses": "it is not allowed
/// to perform ... atomic accesses of different sizes" that race), so byte-sized stores next to
/// the readers' word loads would be a data race in Rust's eyes even where the hardware is fine.
///
/// # Safety
/// The 8-aligned words containing `dst..dst + src.len()` must be inside a live mapping that is
/// only accessed through 8-byte atomics.
#[inline(never)]
unsafe fn atomic_copy_in(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    if n == 0 {
        return;
    }
    let addr = dst as usize;
    let mut i = 0;
    let head = addr % 8;
    if head != 0 {
        let k = (8 - head).min(n);
        // SAFETY: the aligned word containing dst is inside the mapping per the contract.
        let w = unsafe { AtomicU64::from_ptr(dst.sub(head) as *mut u64) };
        merge(w, head, &src[..k]);
        i = k;
    }
    while i + 8 <= n {
        let v = u64::from_ne_bytes(src[i..i + 8].try_into().unwrap());
        // SAFETY: dst + i is 8-aligned here and in bounds per the contract.
        unsafe { AtomicU64::from_ptr(dst.add(i) as *mut u64).store(v, Ordering::Relaxed) };
        i += 8;
    }
    if i < n {
        // SAFETY: dst + i is 8-aligned; its word is inside the mapping per the contract.
        let w = unsafe { AtomicU64::from_ptr(dst.add(i) as *mut u64) };
        merge(w, 0, &src[i..]);
    }
}

/// [`atomic_copy_in`] of whole words: one relaxed 8-byte store per word, no merges.
///
/// # Safety
/// `dst` must be 8-aligned, `src.len()` a multiple of 8, and `dst..dst + src.len()` inside a
/// live mapping that is only accessed through 8-byte atomics.
#[inline(always)]
unsafe fn atomic_copy_words(dst: *mut u8, src: &[u8]) {
    debug_assert!(dst as usize % 8 == 0 && src.len() % 8 == 0);
    let dst = dst as *mut u64;
    let src_words = src.as_ptr() as *const [u8; 8];
    let store = |i: usize| {
        // SAFETY: callers pass i < src.len() / 8: bytes 8i..8i + 8 of `src` are readable
        // (an array of bytes, any alignment will do), and word i of `dst` is 8-aligned and
        // inside `dst..dst + src.len()` per the contract.
        unsafe {
            let w = u64::from_ne_bytes(src_words.add(i).read());
            AtomicU64::from_ptr(dst.add(i)).store(w, Ordering::Relaxed);
        }
    };
    // Up to sixteen words (a Key-Write slot, an Append batch) straight, one jump to the
    // stores of their count; more two at a time.
    macro_rules! straight {
        ($($n:literal)*) => {
            match src.len() / 8 {
                0 => {}
                $($n => {
                    let mut i = 0;
                    while i < $n {
                        store(i);
                        i += 1;
                    }
                })*
                n => {
                    let mut i = 0;
                    while i + 2 <= n {
                        store(i);
                        store(i + 1);
                        i += 2;
                    }
                    if i < n {
                        store(i);
                    }
                }
            }
        };
    }
    straight!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
}

/// [`atomic_copy_words`] of 2 to 4 words without a jump on their count: words 0 and 1, then
/// the two at `tail = src.len() - 16` (the same words again when there are fewer than four;
/// storing a word's own bytes twice leaves what a reader sees unchanged).
///
/// # Safety
/// As [`atomic_copy_words`], and `16 <= src.len() <= 32`, `tail == src.len() - 16`.
#[inline(always)]
unsafe fn atomic_copy_2_to_4_words(dst: *mut u8, src: &[u8], tail: usize) {
    debug_assert!((16..=32).contains(&src.len()) && tail == src.len() - 16);
    let store = |at: usize| {
        // SAFETY: at + 8 <= src.len() (at is 0, 8, tail or tail + 8): bytes at..at + 8 of
        // `src` are readable, and dst + at is 8-aligned and inside dst..dst + src.len()
        // per the contract.
        unsafe {
            let w = u64::from_ne_bytes(src.as_ptr().add(at).cast::<[u8; 8]>().read());
            AtomicU64::from_ptr(dst.add(at).cast::<u64>()).store(w, Ordering::Relaxed);
        }
    };
    store(0);
    store(8);
    store(tail);
    store(tail + 8);
}

/// Replaces bytes `at..at + bytes.len()` of the word `w` (native byte order), leaving the others.
#[inline]
fn merge(w: &AtomicU64, at: usize, bytes: &[u8]) {
    let mut cur = w.load(Ordering::Relaxed);
    loop {
        let mut b = cur.to_ne_bytes();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        let new = u64::from_ne_bytes(b);
        match w.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

/// Copies from `src` into `dst` with relaxed 8-byte atomic loads (see [`atomic_copy_in`]): a
/// partial word at either end is loaded whole and the wanted bytes taken from it.
///
/// # Safety
/// The 8-aligned words containing `src..src + dst.len()` must be inside a live mapping that is
/// only accessed through 8-byte atomics.
#[inline]
unsafe fn atomic_copy_out(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let addr = src as usize;
    let mut i = 0;
    let head = addr % 8;
    if head != 0 {
        let k = (8 - head).min(n);
        // SAFETY: the aligned word containing src is inside the mapping per the contract.
        let v = unsafe { AtomicU64::from_ptr(src.sub(head) as *mut u64).load(Ordering::Relaxed) };
        dst[..k].copy_from_slice(&v.to_ne_bytes()[head..head + k]);
        i = k;
    }
    while i + 8 <= n {
        // SAFETY: src + i is 8-aligned and in bounds.
        let v = unsafe { AtomicU64::from_ptr(src.add(i) as *mut u64).load(Ordering::Relaxed) };
        dst[i..i + 8].copy_from_slice(&v.to_ne_bytes());
        i += 8;
    }
    if i < n {
        // SAFETY: src + i is 8-aligned; its word is inside the mapping per the contract.
        let v = unsafe { AtomicU64::from_ptr(src.add(i) as *mut u64).load(Ordering::Relaxed) };
        let k = n - i;
        dst[i..].copy_from_slice(&v.to_ne_bytes()[..k]);
    }
}

/// The transparent huge page size on x86-64 and most arm64 kernels.
const THP_SIZE: usize = 2 << 20;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn is_hugetlbfs(path: &Path) -> bool {
    let dir = path.parent().unwrap_or(Path::new("."));
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe_zeroed_statfs();
    // SAFETY: c is a valid NUL-terminated path and st a valid out-pointer.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type == 0x958458f6 // HUGETLBFS_MAGIC
}

fn unsafe_zeroed_statfs() -> libc::statfs {
    // SAFETY: statfs is a plain C struct for which all-zero bytes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Hugepages the kernel has reserved and free, from `/proc/meminfo` (for operator reports).
pub fn hugepage_status() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((get("HugePages_Total:")?, get("HugePages_Free:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed writer does what `write` of the same bytes does: in bounds, aligned or not,
    /// whole words or not, and refused past the end, below the start or with too little data.
    #[test]
    fn fixed_writer_is_write() {
        const LEN: usize = 4096;
        let a = Arc::new(Region::anonymous(LEN, false).unwrap());
        let b = Region::anonymous(LEN, false).unwrap();
        assert!(FixedWriter::new(a.clone(), 0).is_none());
        assert!(FixedWriter::new(a.clone(), LEN + 1).is_none());
        let data: Vec<u8> = (0..300u32).map(|i| i as u8 ^ 0x5A).collect();
        for n in [1, 7, 8, 12, 16, 20, 24, 32, 40, 72, 128, 136, 200, 256] {
            let w = FixedWriter::new(a.clone(), n).unwrap();
            let offs = [
                0u64,
                3,
                8,
                1000,
                (LEN - n) as u64,
                (LEN - n + 1) as u64,
                u64::MAX - 4,
            ];
            for off in offs {
                let want = b.write(off, &data[..n]);
                assert_eq!(w.write(off, &data), want, "len {n} at {off}");
                assert_eq!(w.write(off, &data[..n]), want, "len {n} at {off}, exact");
            }
            assert_eq!(w.write(0, &data[..n - 1]), Err(OutOfBounds), "short data");
        }
        let (mut ma, mut mb) = (vec![0u8; LEN], vec![0u8; LEN]);
        a.read(0, &mut ma).unwrap();
        b.read(0, &mut mb).unwrap();
        assert!(ma == mb);
    }

    /// Regions of 2 MiB and more start on a 2 MiB boundary (so transparent huge pages can back
    /// all of them); every byte of them, and of smaller ones, is usable.
    #[test]
    fn large_ordinary_regions_are_huge_page_aligned() {
        for len in [4096usize, 100_000, 2 << 20, (5 << 20) + 123] {
            let r = Region::anonymous(len, false).unwrap();
            if len >= 2 << 20 {
                assert_eq!(r.addr() % (2 << 20), 0, "len {len}");
            }
            r.write(0, &[1]).unwrap();
            r.write(len as u64 - 1, &[2]).unwrap();
            let mut b = [0u8; 1];
            r.read(len as u64 - 1, &mut b).unwrap();
            assert_eq!(b, [2]);
            assert!(r.write(len as u64, &[3]).is_err());
        }
    }

    #[test]
    fn write_read_bounds() {
        let r = Region::anonymous(100, true).unwrap();
        r.write(3, b"hello world, unaligned").unwrap();
        let mut out = [0u8; 22];
        r.read(3, &mut out).unwrap();
        assert_eq!(&out, b"hello world, unaligned");
        assert_eq!(r.write(90, &[0; 11]), Err(OutOfBounds));
        // Whole aligned words (the word-store path) are bounds-checked the same way.
        r.write(88, &[7; 8]).unwrap();
        assert_eq!(r.write(96, &[0; 8]), Err(OutOfBounds));
        assert_eq!(r.write(64, &[0; 40]), Err(OutOfBounds));
        assert_eq!(r.write(u64::MAX - 7, &[0; 8]), Err(OutOfBounds));
        assert_eq!(r.write(u64::MAX, &[0; 1]), Err(OutOfBounds));
        assert_eq!(r.read(100, &mut [0; 1]), Err(OutOfBounds));
        r.write(100, &[]).unwrap();
    }

    #[test]
    fn atomics() {
        let r = Region::anonymous(64, false).unwrap();
        assert_eq!(r.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(r.fetch_add(8, 0x1_0000_0007).unwrap(), 5);
        assert_eq!(r.load_u64(8).unwrap(), 0x1_0000_000c);
        let mut b = [0u8; 8];
        r.read(8, &mut b).unwrap();
        assert_eq!(
            u64::from_le_bytes(b),
            0x1_0000_000c,
            "counters are little-endian in memory"
        );
        assert_eq!(r.compare_swap(8, 0x1_0000_000c, 42).unwrap(), 0x1_0000_000c);
        assert_eq!(r.compare_swap(8, 7, 1).unwrap(), 42);
        assert_eq!(r.fetch_add(4, 1), Err(OutOfBounds), "misaligned");
        assert_eq!(r.fetch_add(64, 1), Err(OutOfBounds));
    }

    #[test]
    fn file_backed_region_survives_remap() {
        let dir = std::env::temp_dir().join(format!("dta-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r");
        {
            let r = Region::file(&path, 4096).unwrap();
            r.write(10, b"persist").unwrap();
        }
        let r = Region::file(&path, 4096).unwrap();
        let mut out = [0u8; 7];
        r.read(10, &mut out).unwrap();
        assert_eq!(&out, b"persist");
        drop(r);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unaligned_copies_of_every_length_and_offset_touch_only_their_bytes() {
        let r = Region::anonymous(256, false).unwrap();
        let bg: Vec<u8> = (0..256).map(|i| (i as u8) ^ 0xA5).collect();
        for off in 0..8u64 {
            // Up to twelve words: the straight stores of one to four words and the loop's
            // odd and even counts when offset and length are whole words.
            for len in 1..=96usize {
                r.write(0, &bg).unwrap();
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(13) ^ off as u8)
                    .collect();
                r.write(64 + off, &data).unwrap();
                let mut got = vec![0u8; 256];
                r.read(0, &mut got).unwrap();
                let mut want = bg.clone();
                want[64 + off as usize..64 + off as usize + len].copy_from_slice(&data);
                assert_eq!(got, want, "offset {off} length {len}");
                let mut part = vec![0u8; len];
                r.read(64 + off, &mut part).unwrap();
                assert_eq!(part, data);
            }
        }
    }

    #[test]
    fn concurrent_unaligned_writers_and_a_reader_never_tear_or_clobber() {
        // Two writers own interleaved 3-byte fields that share words; a reader loads the
        // region all along. Every field ends with its writer's last value (a merge never
        // clobbers the neighbour's bytes), and a field within one word is never seen torn
        // (fields across a word boundary may be: only aligned words are atomic, as in RDMA).
        let r = std::sync::Arc::new(Region::anonymous(96, false).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for round in 0..20_000u32 {
                        let v = (round as u8).wrapping_mul(2).wrapping_add(w);
                        for f in (w as u64..32).step_by(2) {
                            r.write(f * 3, &[v; 3]).unwrap();
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut b = [0u8; 96];
                while !stop.load(Ordering::Relaxed) {
                    r.read(0, &mut b).unwrap();
                    for (i, f) in b.chunks(3).enumerate() {
                        if (i * 3) / 8 == (i * 3 + 2) / 8 {
                            assert!(f[0] == f[1] && f[1] == f[2], "a torn field: {f:?}");
                        }
                    }
                }
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        let mut b = [0u8; 96];
        r.read(0, &mut b).unwrap();
        for (f, chunk) in b.chunks(3).enumerate() {
            let last = (19_999u32 as u8)
                .wrapping_mul(2)
                .wrapping_add((f % 2) as u8);
            assert_eq!(chunk, [last; 3], "field {f}");
        }
    }
}
