//! Merging cells: the lane-wise merges the translator runs on every sketch report (one loop
//! per op, vectorised; an AVX2 build chosen at run time) and the scalar merge of one cell.

use super::{CellWidth, MergeOp};

/// Merges `src` into `dst` lane by lane. `cap` is the cell maximum for [`MergeOp::Sum`]
/// (saturation); ignored by the others. Written as one straight loop over 32-bit lanes so
/// the compiler vectorises it.
#[inline]
pub fn merge_lanes(op: MergeOp, cap: u32, dst: &mut [u32], src: &[u32]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    match op {
        MergeOp::Sum if cap == u32::MAX => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.saturating_add(*s);
            }
        }
        MergeOp::Sum => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.saturating_add(*s).min(cap);
            }
        }
        MergeOp::Max => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = (*d).max(*s);
            }
        }
        MergeOp::SignedSum => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.wrapping_add(*s);
            }
        }
    }
}

/// Merges big-endian cells of width `w` (as they travel in a report) into `dst`, as many as
/// both hold. A [`MergeOp::SignedSum`] cell narrower than 4 bytes is sign-extended first.
///
/// The common case, 4-byte cells on a CPU with AVX2, goes from the caller straight into the
/// AVX2 loops: a width test and a CPU-flag test a report. (As a call of its own, this
/// function's set-up cost 39 instructions a report, 0.15 a merged counter at 256 counters a
/// report.)
#[inline(always)]
pub fn merge_wire_cells(op: MergeOp, w: CellWidth, dst: &mut [u32], cells: &[u8]) {
    if w.bytes() == 4 && wide::merge_words(op, dst, cells) {
        return;
    }
    merge_wire_cells_portable(op, w, dst, cells);
}

/// [`merge_wire_cells`] without AVX2, and for cells of 1 or 2 bytes.
#[inline(never)]
pub(super) fn merge_wire_cells_portable(op: MergeOp, w: CellWidth, dst: &mut [u32], cells: &[u8]) {
    let cap = w.max();
    match w.bytes() {
        4 => merge_words(op, dst, cells),
        2 => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(2)) {
                let raw = u16::from_be_bytes([c[0], c[1]]);
                let s = if op == MergeOp::SignedSum {
                    raw as i16 as i32 as u32
                } else {
                    raw as u32
                };
                *d = merge_one(op, cap, *d, s);
            }
        }
        _ => {
            for (d, &c) in dst.iter_mut().zip(cells) {
                let s = if op == MergeOp::SignedSum {
                    c as i8 as i32 as u32
                } else {
                    c as u32
                };
                *d = merge_one(op, cap, *d, s);
            }
        }
    }
}

/// The 4-byte merge of as many cells as `dst` and `cells` both hold: one loop per op, each a
/// lane-wise byte swap and a vector op (the compiler vectorizes them; [`wide`] compiles the
/// same loops for AVX2).
#[inline(always)]
pub(super) fn merge_words(op: MergeOp, dst: &mut [u32], cells: &[u8]) {
    // Both slices cut to the same count: the loops then need no length checks of their own.
    let n = dst.len().min(cells.len() / 4);
    let (dst, cells) = (&mut dst[..n], &cells[..n * 4]);
    match op {
        MergeOp::Sum => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = d.saturating_add(s);
            }
        }
        MergeOp::Max => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = (*d).max(s);
            }
        }
        MergeOp::SignedSum => {
            for (d, c) in dst.iter_mut().zip(cells.chunks_exact(4)) {
                let s = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                *d = d.wrapping_add(s);
            }
        }
    }
}

/// [`merge_words`] compiled for AVX2 (eight lanes per instruction, byte swaps by shuffle),
/// chosen at run time when the CPU has it ([`crate::cpu`]); the portable loops otherwise.
pub(super) mod wide {
    use super::MergeOp;

    /// Merges as many 4-byte cells as `dst` and `cells` both hold with the AVX2 build of the
    /// loops; false (nothing done) without AVX2.
    #[inline(always)]
    pub(in crate::sketch) fn merge_words(op: MergeOp, dst: &mut [u32], cells: &[u8]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::has_avx2() {
            #[allow(unsafe_code)]
            // SAFETY: `has_avx2` saw AVX2 on this CPU.
            unsafe {
                merge_avx2(op, dst, cells)
            };
            return true;
        }
        let _ = (op, dst, cells);
        false
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn merge_avx2(op: MergeOp, dst: &mut [u32], cells: &[u8]) {
        super::merge_words(op, dst, cells)
    }
}

/// One cell's merge (the scalar form of [`merge_lanes`]).
#[inline(always)]
pub fn merge_one(op: MergeOp, cap: u32, d: u32, s: u32) -> u32 {
    match op {
        MergeOp::Sum => d.saturating_add(s).min(cap),
        MergeOp::Max => d.max(s),
        MergeOp::SignedSum => d.wrapping_add(s),
    }
}
