//! What the CPU offers the hot paths beyond the x86-64 baseline, looked up once.
//!
//! Code that uses an instruction set extension has a portable twin that computes the same
//! result (each pair is property-tested for equality); these answers choose between them at
//! run time, so one binary runs everywhere and uses what it finds. Each answer costs one
//! relaxed atomic load after the first call (the standard library's detection costs more per
//! call, and the CRC and merge loops ask on every report).

use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not looked up; 1: present; 2: absent.
static PCLMUL: AtomicU8 = AtomicU8::new(0);
static AVX2: AtomicU8 = AtomicU8::new(0);
static PCLMUL_SSSE3: AtomicU8 = AtomicU8::new(0);

#[inline(always)]
fn cached(cell: &AtomicU8, look: fn() -> bool) -> bool {
    match cell.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = look();
            cell.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Carry-less multiplication (PCLMULQDQ, with SSE4.1 for the lane extracts): the CRC folds
/// of [`crate::crc::fold`].
#[inline]
pub fn has_pclmul() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cached(&PCLMUL, || {
            std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.1")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (&PCLMUL, cached);
        false
    }
}

/// [`has_pclmul`] and SSSE3 (PSHUFB): the ICRC check's fold, which moves a frame's first
/// bytes into a block by a byte shuffle ([`crate::icrc::check_after_prefix`]).
#[inline]
pub fn has_pclmul_ssse3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cached(&PCLMUL_SSSE3, || {
            has_pclmul() && std::arch::is_x86_feature_detected!("ssse3")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = &PCLMUL_SSSE3;
        false
    }
}

/// AVX2: eight 32-bit lanes per instruction (the Sketch-Merge cell merges).
#[inline]
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cached(&AVX2, || std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = &AVX2;
        false
    }
}
