//! What the CPU offers the hot paths beyond the x86-64 baseline, looked up once.
//!
//! Code that uses an instruction set extension has a portable twin that computes the same
//! result (each pair is property-tested for equality); these answers choose between them at
//! run time, so one binary runs everywhere and uses what it finds. Each answer costs one
//! relaxed atomic load after the first call (the standard library's detection costs more per
//! call, and the CRC and merge loops ask on every report).
//!
//! Whole loops can be compiled twice as well: [`with_v3`] runs its code compiled for the
//! x86-64-v3 level (AVX2, BMI2, MOVBE, PCLMULQDQ: wider moves, and the CRC folds inlined
//! instead of called) where the CPU has it, else for the baseline. The translator's runs of
//! Key-Writes and Key-Increments take it; the tests compare the two copies' bytes.

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

static V3: AtomicU8 = AtomicU8::new(0);

/// The x86-64-v3 level (AVX2, BMI1/2, FMA, MOVBE, LZCNT) with carry-less multiplication: what
/// [`with_v3`] runs its code compiled for (unless [`allow_v3`]`(false)` turned that off).
#[inline]
pub fn has_v3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cached(&V3, || {
            use std::arch::is_x86_feature_detected;
            has_pclmul()
                && is_x86_feature_detected!("avx")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("bmi2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("lzcnt")
                && is_x86_feature_detected!("movbe")
                && is_x86_feature_detected!("popcnt")
                && is_x86_feature_detected!("sse4.2")
                && is_x86_feature_detected!("ssse3")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = &V3;
        false
    }
}

/// Lets [`with_v3`] run its x86-64-v3 copies (`true`, the default, on a CPU that has the
/// level) or only the baseline's (`false`): to compare the two in one process, or to rule the
/// v3 copies out when diagnosing. Takes effect at the next [`with_v3`].
pub fn allow_v3(allowed: bool) {
    V3.store(if allowed { 0 } else { 2 }, Ordering::Relaxed);
}

/// Code [`with_v3`] runs. `run` must be `#[inline(always)]`, and so must what it calls on the
/// hot path: code is compiled for v3 only where it is inlined into [`with_v3`]'s v3 copy (a
/// closure would not be: the v3 copy would only call the baseline's).
pub trait Leveled {
    /// What the code returns.
    type Output;
    /// Runs the code.
    fn run(self) -> Self::Output;
}

/// Runs `code`, compiled for the x86-64-v3 level with carry-less multiplication when the CPU
/// has it ([`has_v3`]), else for the baseline. What `code` calls out of line keeps the
/// baseline's instructions. Both copies compute the same results (the source is the same;
/// only the instructions chosen differ).
#[inline(always)]
pub fn with_v3<L: Leveled>(code: L) -> L::Output {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if has_v3() {
        // SAFETY: `v3` only enables features the CPU has, as `has_v3` checked.
        return unsafe { v3(code) };
    }
    code.run()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx,avx2,bmi1,bmi2,fma,lzcnt,movbe,pclmulqdq,popcnt,sse3,ssse3,sse4.1,sse4.2"
)]
#[inline]
fn v3<L: Leveled>(code: L) -> L::Output {
    code.run()
}

/// Asks the CPU to bring the cache line holding `r` into its caches (PREFETCHT0) and goes on
/// without waiting for it: an access a little later finds it there. (A load whose value is
/// unused would not do: it holds up every later instruction's retirement until it completes.)
/// Nothing on other architectures.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault (and `r` is a valid
    // reference); SSE, which it belongs to, is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
