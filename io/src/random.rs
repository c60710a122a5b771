//! Random numbers from the kernel (`getrandom`) for starting PSNs and connection IDs.

/// 32 random bits (falls back to a clock-and-PID mix if `getrandom` is unavailable).
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, b.len(), 0) };
    if n == 4 {
        return u32::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32);
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x ^ (x >> 29)) as u32
}
