//! Random numbers from the kernel's random source, for everything a peer must not predict:
//! R_Keys, QPN bases, starting PSNs, RDMA_CM communication IDs.
//!
//! Only the operating system's CSPRNG is used: `getrandom(2)`, or `/dev/urandom` where that
//! system call is missing (Linux before 3.17). There is deliberately no fallback to a clock or
//! PID mix: a time-seeded value is guessable, and a guessable R_Key or PSN is the whole
//! protection of a QP on an open fabric. If the kernel has no random source at all the process
//! cannot keep its promises and [`random_u32`] panics with a message saying so.

use std::io::Read as _;

/// Fills `buf` from the kernel's random source.
///
/// `getrandom(2)` with no flags blocks only until the kernel's pool is first initialised
/// (early boot), never afterwards.
pub fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: getrandom writes at most rest.len() bytes into rest, a valid, writable,
        // exclusively borrowed buffer.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast::<libc::c_void>(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // A kernel without the system call (or a seccomp filter refusing it).
            Some(libc::ENOSYS) | Some(libc::EPERM) => {
                return std::fs::File::open("/dev/urandom")?.read_exact(&mut buf[done..]);
            }
            _ => return Err(e),
        }
    }
    Ok(())
}

/// 32 random bits from the kernel.
///
/// # Panics
/// If neither `getrandom(2)` nor `/dev/urandom` works: the caller needs unpredictable numbers
/// and there is no honest way to make them.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    if let Err(e) = fill(&mut b) {
        panic!("the kernel's random source (getrandom, /dev/urandom) is unavailable: {e}");
    }
    u32::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_every_byte_and_differs_between_calls() {
        let mut a = [0u8; 4096];
        fill(&mut a).unwrap();
        // 4096 random bytes with fewer than 16 distinct values: broken, not unlucky.
        let distinct = a
            .iter()
            .fold([false; 256], |mut s, &b| {
                s[b as usize] = true;
                s
            })
            .iter()
            .filter(|&&x| x)
            .count();
        assert!(distinct > 200, "{distinct} distinct byte values");
        let xs: Vec<u32> = (0..64).map(|_| random_u32()).collect();
        let mut d = xs.clone();
        d.sort_unstable();
        d.dedup();
        assert!(d.len() >= 63, "{xs:?}");
    }
}
