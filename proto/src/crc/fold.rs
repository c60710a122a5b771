//! Reflected CRC-32 by carry-less multiplication: folding 16 bytes at a time and a Barrett
//! reduction, for any polynomial (the ICRC's IEEE one and the hash profiles' own).
//!
//! # The arithmetic
//! A reflected CRC register `r` stands for the polynomial `R(x) = Σ r_j x^(31-j)`; after a
//! message `M` from a zero register it holds `M(x)·x^32 mod P(x)`. Write `rev_w(A)` for the
//! `w`-bit integer whose bit `i` is the coefficient of `x^(w-1-i)` in `A`: a message block
//! loaded little-endian is `rev_128` of its polynomial, and a carry-less product of two
//! `rev_64` operands is `rev_128(A·B·x)` (the product has 127 bits, so it comes out one place
//! short). Every constant below is chosen with that extra `x` in mind:
//!
//! - **fold** (16 bytes across 16 bytes): `X·x^128 ≡ X_a·(x^191 mod P)·x + X_b·(x^127 mod P)·x`,
//!   where `X_a` is the block's first eight bytes (the higher powers) and `X_b` the last eight;
//! - **reduce** a 128-bit `X` to the register `X·x^32 mod P`: `X_a·(x^95 mod P)·x + X_b·x^32`
//!   (96 bits), then its top 32 bits times `(x^63 mod P)·x` onto its low 64 (64 bits), then
//!   Barrett with `μ = ⌊x^64 / P⌋`, exact for a remainder of degree < 64;
//! - **one block** ([`Clmul::block_reg`], [`BlockKeys`]): the first step as in reduce, then
//!   Barrett over all 96 bits with `μ' = ⌊x^96 / P⌋`: three multiplies instead of four.
//!
//! [`Clmul::reduce`] (or [`Clmul::block_reg`]) of a 16-byte block is thus the CRC register of
//! those 16 bytes from zero (leading zeros leave a zero register unchanged).
//!
//! # Two implementations, chosen at run time
//! [`Clmul::detect`] picks the CPU's carry-less multiply (PCLMULQDQ on x86-64) when it has one,
//! else a portable bit-serial multiply; both compute the same products, so every function here
//! gives the same result either way (checked by the property tests against the table-driven
//! engine). The portable multiply is slow (64 steps); callers that have a table-driven path
//! keep using it when [`Clmul::is_native`] is false. The per-report paths
//! ([`Clmul::update_block`], [`Clmul::update_word_blocks`]) also have VEX-encoded copies, taken
//! when the CPU has AVX2: three-operand forms spare the SSE forms' register copies.

/// Constants of one polynomial (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldKeys {
    /// `rev_64(x^191 mod P)`, `rev_64(x^127 mod P)`: a 16-byte fold.
    fold: [u64; 2],
    /// `rev_64(x^95 mod P)`.
    k95: u64,
    /// `rev_64(x^63 mod P)`.
    k63: u64,
    /// `rev_64(⌊x^64 / P⌋)`.
    mu: u64,
    /// `rev_64(P)`, with its `x^32` term.
    p: u64,
    /// The reduction of one block by three multiplies.
    block: BlockKeys,
}

/// `x^n mod P` (normal form: bit i is the coefficient of x^i; `poly` without its x^32 term).
pub(crate) const fn xpow_mod(n: u32, poly: u32) -> u64 {
    let p33 = (1u64 << 32) | poly as u64;
    let mut r = 1u64;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= p33;
        }
        i += 1;
    }
    r
}

/// `⌊x^64 / P⌋` (degree 32).
pub(crate) const fn barrett_mu(poly: u32) -> u64 {
    let p33 = (1u128 << 32) | poly as u128;
    let mut rem = 1u128 << 64;
    let mut q = 0u64;
    let mut i = 64;
    while i >= 32 {
        if rem & (1u128 << i) != 0 {
            q |= 1 << (i - 32);
            rem ^= p33 << (i - 32);
        }
        i -= 1;
    }
    q
}

/// `⌊x^96 / P⌋` without its `x^64` term (it always has one).
const fn barrett_mu96_low(poly: u32) -> u64 {
    let p33 = (1u128 << 32) | poly as u128;
    let mut rem = 1u128 << 96;
    let mut q = 0u128;
    let mut i = 96;
    while i >= 32 {
        if rem & (1u128 << i) != 0 {
            q |= 1 << (i - 32);
            rem ^= p33 << (i - 32);
        }
        i -= 1;
    }
    q as u64
}

/// Constants of one polynomial for [`Clmul::block_reg`]: the register of one 16-byte block
/// (a key of at most 16 bytes behind zeros) by three carry-less multiplies. 32 bytes, aligned
/// so that one lane's constants are two vector loads.
///
/// For `X` (the block's polynomial, degree < 128, `X = X_a·x^64 + X_b`):
/// `Z = X_a·(x^95 mod P)·x + X_b·x^32 ≡ X·x^32` (degree < 96, as in [`Clmul::reduce`]); then
/// Barrett over 96 bits: `Q = ⌊⌊Z / x^32⌋·μ' / x^64⌋` with `μ' = ⌊x^96 / P⌋` (degree 64,
/// so `Q = Z_hi + ⌊Z_hi·(μ' − x^64) / x^64⌋`, exact for polynomials), and the register is
/// `(Z + Q·P) mod x^32`, of which only `Q·(P − x^32)` reaches the low 32 coefficients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct BlockKeys {
    /// `rev_64(x^95 mod P)`, `rev_64(⌊x^96 / P⌋ − x^64)`.
    k: [u64; 2],
    /// `rev_64(P − x^32)`, and a zero word.
    p: [u64; 2],
}

impl BlockKeys {
    /// The constants of `poly` (normal form, x^32 implied).
    pub const fn new(poly: u32) -> BlockKeys {
        BlockKeys {
            k: [
                xpow_mod(95, poly).reverse_bits(),
                barrett_mu96_low(poly).reverse_bits(),
            ],
            p: [(poly as u64).reverse_bits(), 0],
        }
    }
}

/// Constants of one polynomial for [`Clmul::shifted_block_reg`]: the register of one 16-byte
/// block followed by `distance` zero bytes (an RDMA frame's PSN word and address, with the
/// rest of the frame behind them), by four carry-less multiplies whatever the distance.
///
/// For `X = X_a·x^64 + X_b` and `s = 8·distance`: `Z = X_a·(x^(95+s) mod P)·x + X_b·(x^(31+s)
/// mod P)·x ≡ X·x^(32+s)` (degree < 96, as [`BlockKeys`]'s `Z` with the shift folded into both
/// constants), then the same Barrett step over 96 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct WindowKeys {
    /// `rev_64(x^(95+s) mod P)`, `rev_64(x^(31+s) mod P)`.
    k: [u64; 2],
    /// The Barrett step's constants (its first unused).
    block: BlockKeys,
}

impl WindowKeys {
    /// The constants of `poly` (normal form, x^32 implied) for a block followed by `distance`
    /// bytes.
    pub const fn new(poly: u32, distance: u32) -> WindowKeys {
        let s = 8 * distance;
        WindowKeys {
            k: [
                xpow_mod(95 + s, poly).reverse_bits(),
                xpow_mod(31 + s, poly).reverse_bits(),
            ],
            block: BlockKeys::new(poly),
        }
    }
}

impl FoldKeys {
    /// The constants of `poly` (normal form, x^32 implied).
    pub const fn new(poly: u32) -> FoldKeys {
        FoldKeys {
            fold: [
                xpow_mod(191, poly).reverse_bits(),
                xpow_mod(127, poly).reverse_bits(),
            ],
            k95: xpow_mod(95, poly).reverse_bits(),
            k63: xpow_mod(63, poly).reverse_bits(),
            mu: barrett_mu(poly).reverse_bits(),
            p: ((1u64 << 32) | poly as u64).reverse_bits(),
            block: BlockKeys::new(poly),
        }
    }
}

/// A carry-less multiplier: the CPU's instruction or the portable loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clmul {
    native: bool,
}

impl Clmul {
    /// The CPU's carry-less multiply if it has one (cached by the standard library's feature
    /// detection), else the portable one.
    #[inline]
    pub fn detect() -> Clmul {
        Clmul {
            native: native_available(),
        }
    }

    /// The portable multiply, whatever the CPU has (tests, and the reference the native path
    /// is checked against).
    pub const fn portable() -> Clmul {
        Clmul { native: false }
    }

    /// True if this uses the CPU's instruction.
    #[inline]
    pub fn is_native(self) -> bool {
        self.native
    }

    /// The carry-less product of `a` and `b`.
    #[inline(always)]
    fn mul(self, a: u64, b: u64) -> u128 {
        if self.native {
            native::mul(a, b)
        } else {
            portable_mul(a, b)
        }
    }

    /// The CRC register `X·x^32 mod P` of the 128-bit block `x` (a message block loaded
    /// little-endian), i.e. the register after those 16 bytes from zero.
    #[inline]
    pub fn reduce(self, k: &FoldKeys, x: u128) -> u32 {
        // 128 → 96 bits: X_a·(x^95 mod P)·x + X_b·x^32.
        let z = self.mul(x as u64, k.k95) ^ (((x >> 64) as u64 as u128) << 32);
        // 96 → 64 bits: the top 32 bits (z's bits 32..64) times (x^63 mod P)·x.
        let v = (self.mul(z as u64, k.k63) >> 64) as u64 ^ (z >> 64) as u64;
        // Barrett: q = ⌊⌊V / x^32⌋·μ / x^32⌋, R = (V + q·P) mod x^32.
        let t = self.mul((v & 0xFFFF_FFFF) << 32, k.mu);
        let q = ((t >> 31) as u64) & 0xFFFF_FFFF_0000_0000;
        let s = self.mul(q, k.p);
        (v >> 32) as u32 ^ (s >> 95) as u32
    }

    /// The CRC register `X·x^32 mod P` of the 16-byte block `x` (loaded little-endian), like
    /// [`Clmul::reduce`] but by three multiplies (see [`BlockKeys`]).
    #[inline]
    pub fn block_reg(self, k: &BlockKeys, x: u128) -> u32 {
        // Z: X_a·(x^95 mod P)·x + X_b·x^32, in bits 32..128.
        let z = self.mul(x as u64, k.k[0]) ^ (((x >> 64) as u64 as u128) << 32);
        // rev_64(Z_hi) is bits 32..96; the product comes out one place short.
        let zh = (z >> 32) as u64;
        let q = zh ^ ((self.mul(zh, k.k[1]) as u64) << 1);
        // The low 32 coefficients of Z + Q·(P − x^32): bits 96..128 and bits 95..127.
        (z >> 96) as u32 ^ (self.mul(q, k.p[0]) >> 95) as u32
    }

    /// The CRC register, from zero, of the 16-byte block `x` (loaded little-endian) followed
    /// by as many zero bytes as `k` was made for ([`WindowKeys`]): an RDMA frame's share of
    /// its PSN word and address, four multiplies instead of twelve table loads.
    #[inline]
    pub fn shifted_block_reg(self, k: &WindowKeys, x: u128) -> u32 {
        if self.native {
            return native::shifted_block_reg(k, x);
        }
        let z = self.mul(x as u64, k.k[0]) ^ self.mul((x >> 64) as u64, k.k[1]);
        let zh = (z >> 32) as u64;
        let q = zh ^ ((self.mul(zh, k.block.k[1]) as u64) << 1);
        (z >> 96) as u32 ^ (self.mul(q, k.block.p[0]) >> 95) as u32
    }

    /// [`Clmul::block_reg`] of one 16-byte block under several polynomials at once (a key's
    /// checksum and replica slots): `out[i]` is the register of `block` from zero under
    /// `keys[i]`. The block is loaded once; each polynomial costs three multiplies.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    ///
    /// Up to four polynomials (a checksum and three replicas) by the CPU's multiply take code
    /// that inlines into a caller compiled for PCLMULQDQ (the keyed runs' x86-64-v3 copy,
    /// [`crate::cpu::with_v3`]); elsewhere it is one call.
    #[inline(always)]
    pub fn block_regs(self, keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        assert!(out.len() >= keys.len(), "a register per polynomial");
        if self.native {
            return match keys.len() {
                1 => native::block_regs_few::<1>(keys, block, out),
                2 => native::block_regs_few::<2>(keys, block, out),
                3 => native::block_regs_few::<3>(keys, block, out),
                4 => native::block_regs_few::<4>(keys, block, out),
                _ => native::block_regs(keys, block, out),
            };
        }
        let x = u128::from_le_bytes(*block);
        for (k, o) in keys.iter().zip(out) {
            *o = self.block_reg(k, x);
        }
    }

    /// The register after the 16 bytes of `block` from `state` (the register is XORed into the
    /// block's first four bytes), by [`Clmul::block_reg`].
    #[inline]
    pub fn update_block(self, k: &FoldKeys, state: u32, block: &[u8; 16]) -> u32 {
        if self.native {
            return native::update_block(k, state, block);
        }
        self.block_reg(&k.block, u128::from_le_bytes(*block) ^ state as u128)
    }

    /// The CRC register from zero over `head` and then `data`, whose length is a multiple of
    /// 16 (the whole of it is folded; no tables).
    ///
    /// # Panics
    /// If `data`'s length is not a multiple of 16.
    #[inline]
    pub fn update_word_blocks(self, k: &FoldKeys, head: Option<[u8; 4]>, data: &[u8]) -> u32 {
        // A 4-byte head is an 8-byte one behind four zeros (which leave a zero register as it
        // is).
        let head = u64::from(head.map_or(0, u32::from_le_bytes)) << 32;
        self.update_head8_blocks(k, head.to_le_bytes(), data)
    }

    /// [`Clmul::update_word_blocks`] of one to four whole blocks (a Key-Write slot, a
    /// postcard chunk): inlined into a caller compiled for PCLMULQDQ (the keyed runs'
    /// x86-64-v3 copy, [`crate::cpu::with_v3`]), one call elsewhere. `None` with the portable
    /// multiplier or another length. (The same dispatch inside `update_word_blocks`, under
    /// `Crc32::reg_of_word_and_blocks`, left the fold out of line in that copy: Key-Write +20
    /// instructions. Hence a method of its own, which `RdmaTemplate::padded_tail_reg` asks
    /// first.)
    #[inline(always)]
    pub fn word_and_few_blocks(
        self,
        k: &FoldKeys,
        head: Option<[u8; 4]>,
        data: &[u8],
    ) -> Option<u32> {
        if !self.native {
            return None;
        }
        let head = u64::from(head.map_or(0, u32::from_le_bytes)) << 32;
        Some(match data.len() {
            16 => native::head8_blocks::<1>(k, head, data),
            32 => native::head8_blocks::<2>(k, head, data),
            48 => native::head8_blocks::<3>(k, head, data),
            64 => native::head8_blocks::<4>(k, head, data),
            _ => return None,
        })
    }

    /// The CRC register from zero over the 8 bytes `head` and then `data`, whose length is a
    /// multiple of 16 (an Append batch: its entries and the 8-byte trailer). The head is the end
    /// of a block of zeros, so every byte is folded: no tables.
    ///
    /// # Panics
    /// If `data`'s length is not a multiple of 16.
    #[inline]
    pub fn update_head8_blocks(self, k: &FoldKeys, head: [u8; 8], data: &[u8]) -> u32 {
        assert!(data.len() % 16 == 0, "whole blocks");
        let head = u64::from_le_bytes(head);
        if self.native {
            return native::update_head8_blocks(k, head, data);
        }
        let mut x = (head as u128) << 64;
        for b in data.chunks_exact(16) {
            x = self.fold(k, x) ^ load(b);
        }
        self.reduce(k, x)
    }

    /// `x·x^128 mod P` as a 128-bit block (the accumulator moved past one more block).
    #[inline(always)]
    fn fold(self, k: &FoldKeys, x: u128) -> u128 {
        self.mul(x as u64, k.fold[0]) ^ self.mul((x >> 64) as u64, k.fold[1])
    }

    /// Feeds the whole 16-byte blocks of `data` into the raw register `state`; returns the
    /// register and the bytes left over (fewer than 16). With fewer than 16 bytes, nothing is
    /// consumed.
    #[inline]
    pub fn update_blocks<'d>(self, k: &FoldKeys, state: u32, data: &'d [u8]) -> (u32, &'d [u8]) {
        self.update_blocks_or(k, state, data, 0)
    }

    /// [`Clmul::update_blocks`] with `first_or` ORed into the first block (a little-endian
    /// 128-bit mask): the ICRC's masked BTH byte without a copy of the header.
    #[inline]
    pub fn update_blocks_or<'d>(
        self,
        k: &FoldKeys,
        state: u32,
        data: &'d [u8],
        first_or: u128,
    ) -> (u32, &'d [u8]) {
        if data.len() < 16 {
            return (state, data);
        }
        let rest = &data[data.len() - data.len() % 16..];
        if self.native {
            return (native::update_blocks(k, state, data, first_or), rest);
        }
        let mut blocks = data.chunks_exact(16);
        let mut x = state as u128;
        if let Some(first) = blocks.next() {
            x ^= load(first) | first_or;
        }
        for b in &mut blocks {
            x = self.fold(k, x) ^ load(b);
        }
        (self.reduce(k, x), rest)
    }
}

#[inline(always)]
fn load(b: &[u8]) -> u128 {
    u128::from_le_bytes(b.try_into().expect("a 16-byte block"))
}

/// Carry-less multiplication, one bit at a time.
#[inline]
const fn portable_mul(a: u64, b: u64) -> u128 {
    let mut r = 0u128;
    let mut i = 0;
    while i < 64 {
        if (b >> i) & 1 != 0 {
            r ^= (a as u128) << i;
        }
        i += 1;
    }
    r
}

#[inline]
fn native_available() -> bool {
    crate::cpu::has_pclmul()
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod native {
    use core::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_cvtsi32_si128, _mm_cvtsi64_si128,
        _mm_extract_epi32, _mm_extract_epi64, _mm_load_si128, _mm_loadu_si128, _mm_or_si128,
        _mm_set_epi64x, _mm_slli_epi64, _mm_slli_si128, _mm_srli_si128, _mm_xor_si128,
    };

    use super::{BlockKeys, FoldKeys, WindowKeys};

    /// PCLMULQDQ on two 64-bit operands.
    #[inline(always)]
    pub(super) fn mul(a: u64, b: u64) -> u128 {
        // SAFETY: `Clmul` holds `native: true` only when `native_available()` saw PCLMULQDQ and
        // SSE4.1 on this CPU, and this is reached only through such a `Clmul`.
        unsafe { mul_pclmul(a, b) }
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    fn mul_pclmul(a: u64, b: u64) -> u128 {
        let p: __m128i =
            _mm_clmulepi64_si128::<0x00>(_mm_cvtsi64_si128(a as i64), _mm_cvtsi64_si128(b as i64));
        let lo = _mm_cvtsi128_si64(p) as u64;
        let hi = _mm_extract_epi64::<1>(p) as u64;
        lo as u128 | (hi as u128) << 64
    }

    /// [`super::Clmul::update_blocks`] with the accumulator kept in a vector register: a
    /// 16-byte block costs two multiplies and two XORs.
    #[inline]
    pub(super) fn update_blocks(k: &FoldKeys, state: u32, data: &[u8], first_or: u128) -> u32 {
        // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and SSE4.1.
        unsafe { update_blocks_pclmul(k, state, data, first_or) }
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    fn update_blocks_pclmul(k: &FoldKeys, state: u32, data: &[u8], first_or: u128) -> u32 {
        let mut blocks = data.chunks_exact(16);
        let load = |b: &[u8]| {
            let b: &[u8; 16] = b.try_into().expect("a 16-byte block");
            // SAFETY: `b` is 16 readable bytes; the load is unaligned.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        };
        let first = blocks.next().expect("at least one block");
        let or = _mm_set_epi64x((first_or >> 64) as i64, first_or as i64);
        let mut x = _mm_xor_si128(
            _mm_or_si128(load(first), or),
            _mm_cvtsi32_si128(state as i32),
        );
        let fold = _mm_set_epi64x(k.fold[1] as i64, k.fold[0] as i64);
        for b in &mut blocks {
            let lo = _mm_clmulepi64_si128::<0x00>(x, fold);
            let hi = _mm_clmulepi64_si128::<0x11>(x, fold);
            x = _mm_xor_si128(_mm_xor_si128(lo, hi), load(b));
        }
        // 128 → 96 bits: X_a·(x^95 mod P)·x + X_b·x^32, then 96 → 64 (see `Clmul::reduce`).
        let kk = _mm_set_epi64x(k.k63 as i64, k.k95 as i64);
        let z = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(x, kk),
            _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)),
        );
        let v128 = _mm_xor_si128(_mm_clmulepi64_si128::<0x10>(z, kk), z);
        let v = _mm_extract_epi64::<1>(v128) as u64;
        // Barrett, as in `Clmul::reduce`.
        let mu = _mm_cvtsi64_si128(k.mu as i64);
        let t =
            _mm_clmulepi64_si128::<0x00>(_mm_cvtsi64_si128(((v & 0xFFFF_FFFF) << 32) as i64), mu);
        let t = (_mm_cvtsi128_si64(t) as u64 as u128)
            | ((_mm_extract_epi64::<1>(t) as u64 as u128) << 64);
        let q = ((t >> 31) as u64) & 0xFFFF_FFFF_0000_0000;
        let s = _mm_clmulepi64_si128::<0x00>(
            _mm_cvtsi64_si128(q as i64),
            _mm_cvtsi64_si128(k.p as i64),
        );
        let s_hi = _mm_extract_epi64::<1>(s) as u64;
        (v >> 32) as u32 ^ (s_hi >> 31) as u32
    }
    /// [`super::Clmul::update_block`] by PCLMULQDQ, in VEX encoding when the CPU has AVX2.
    #[inline]
    pub(super) fn update_block(k: &FoldKeys, state: u32, block: &[u8; 16]) -> u32 {
        if crate::cpu::has_avx2() {
            // SAFETY: as in `mul` for PCLMULQDQ and SSE4.1; AVX2, so AVX, was just seen.
            unsafe { update_block_avx(k, state, block) }
        } else {
            // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and
            // SSE4.1.
            unsafe { update_block_pclmul(k, state, block) }
        }
    }

    #[target_feature(enable = "avx,pclmulqdq,sse2,sse4.1")]
    fn update_block_avx(k: &FoldKeys, state: u32, block: &[u8; 16]) -> u32 {
        update_block_pclmul(k, state, block)
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn update_block_pclmul(k: &FoldKeys, state: u32, block: &[u8; 16]) -> u32 {
        let x = _mm_xor_si128(load(block), _mm_cvtsi32_si128(state as i32));
        block_reg_pclmul(&k.block, x, _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)))
    }

    /// [`super::Clmul::block_reg`] of `x`, given `xs` = `x`'s high half moved to bits 32..96.
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn block_reg_pclmul(k: &BlockKeys, x: __m128i, xs: __m128i) -> u32 {
        // SAFETY: `BlockKeys` is `repr(C, align(16))` with `k` at offset 0 and `p` at 16: both
        // are 16 readable bytes at 16-byte alignment.
        let (kk, p) = unsafe {
            (
                _mm_load_si128(k.k.as_ptr().cast()),
                _mm_load_si128(k.p.as_ptr().cast()),
            )
        };
        reduce96_pclmul(
            kk,
            p,
            _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, kk), xs),
        )
    }

    /// The Barrett step of [`block_reg_pclmul`]: the register of `z` (degree < 96), given
    /// `kk` (its high lane `rev_64(⌊x^96 / P⌋ − x^64)`) and `p` (`rev_64(P − x^32)`).
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn reduce96_pclmul(kk: __m128i, p: __m128i, z: __m128i) -> u32 {
        let zh = _mm_srli_si128::<4>(z);
        let q = _mm_xor_si128(
            zh,
            _mm_slli_epi64::<1>(_mm_clmulepi64_si128::<0x10>(zh, kk)),
        );
        let s = _mm_clmulepi64_si128::<0x00>(q, p);
        _mm_extract_epi32::<3>(_mm_xor_si128(z, _mm_slli_epi64::<1>(s))) as u32
    }

    /// [`super::Clmul::shifted_block_reg`] by PCLMULQDQ.
    #[inline(always)]
    pub(super) fn shifted_block_reg(k: &WindowKeys, x: u128) -> u32 {
        // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and SSE4.1.
        unsafe { shifted_block_reg_pclmul(k, x) }
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn shifted_block_reg_pclmul(k: &WindowKeys, x: u128) -> u32 {
        // SAFETY: `WindowKeys` is `repr(C, align(16))` with `k` at offset 0 and its
        // `BlockKeys` (itself `k` then `p`) at 16: each load is 16 readable bytes at 16-byte
        // alignment.
        let (kw, kk, p) = unsafe {
            (
                _mm_load_si128(k.k.as_ptr().cast()),
                _mm_load_si128(k.block.k.as_ptr().cast()),
                _mm_load_si128(k.block.p.as_ptr().cast()),
            )
        };
        let xv = _mm_set_epi64x((x >> 64) as i64, x as i64);
        let z = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(xv, kw),
            _mm_clmulepi64_si128::<0x11>(xv, kw),
        );
        reduce96_pclmul(kk, p, z)
    }

    /// [`super::Clmul::block_regs`] by PCLMULQDQ, in VEX encoding when the CPU has AVX2.
    #[inline]
    pub(super) fn block_regs(keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        if crate::cpu::has_avx2() {
            // SAFETY: as in `mul` for PCLMULQDQ and SSE4.1; AVX2, so AVX, was just seen.
            unsafe { block_regs_avx(keys, block, out) }
        } else {
            // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and
            // SSE4.1.
            unsafe { block_regs_pclmul(keys, block, out) }
        }
    }

    #[target_feature(enable = "avx,pclmulqdq,sse2,sse4.1")]
    fn block_regs_avx(keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        block_regs_pclmul(keys, block, out)
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn block_regs_pclmul(keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        let x = load(block);
        let xs = _mm_slli_si128::<4>(_mm_srli_si128::<8>(x));
        // Up to four polynomials (a checksum and three replicas) straight-line, no loop.
        match (keys.len(), out.len()) {
            (1, 1..) => block_regs_n::<1>(keys, x, xs, out),
            (2, 2..) => block_regs_n::<2>(keys, x, xs, out),
            (3, 3..) => block_regs_n::<3>(keys, x, xs, out),
            (4, 4..) => block_regs_n::<4>(keys, x, xs, out),
            _ => {
                for (k, o) in keys.iter().zip(out) {
                    *o = block_reg_pclmul(k, x, xs);
                }
            }
        }
    }

    /// [`super::Clmul::block_regs`] under `N` polynomials, by PCLMULQDQ.
    #[inline(always)]
    pub(super) fn block_regs_few<const N: usize>(
        keys: &[BlockKeys],
        block: &[u8; 16],
        out: &mut [u32],
    ) {
        // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and SSE4.1.
        unsafe { block_regs_of::<N>(keys, block, out) }
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn block_regs_of<const N: usize>(keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        let x = load(block);
        block_regs_n::<N>(keys, x, _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)), out)
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn block_regs_n<const N: usize>(keys: &[BlockKeys], x: __m128i, xs: __m128i, out: &mut [u32]) {
        let (keys, out) = (&keys[..N], &mut out[..N]);
        for i in 0..N {
            out[i] = block_reg_pclmul(&keys[i], x, xs);
        }
    }

    /// [`super::Clmul::update_head8_blocks`] by PCLMULQDQ, in VEX encoding when the CPU has
    /// AVX2.
    #[inline]
    pub(super) fn update_head8_blocks(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        if crate::cpu::has_avx2() {
            // SAFETY: as in `mul` for PCLMULQDQ and SSE4.1; AVX2, so AVX, was just seen.
            unsafe { update_head8_blocks_avx(k, head, data) }
        } else {
            // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and
            // SSE4.1.
            unsafe { update_head8_blocks_pclmul(k, head, data) }
        }
    }

    /// [`super::Clmul::word_and_few_blocks`]: `N` blocks behind `head`, by PCLMULQDQ.
    #[inline(always)]
    pub(super) fn head8_blocks<const N: usize>(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        // SAFETY: as in `mul`: reached only through a `Clmul` that saw PCLMULQDQ and SSE4.1.
        unsafe { blocks_n::<N>(k, head, data) }
    }

    /// [`update_head8_blocks_pclmul`] in VEX encoding: three-operand instructions save the
    /// register copies of the two-operand SSE forms.
    #[target_feature(enable = "avx,pclmulqdq,sse2,sse4.1")]
    fn update_head8_blocks_avx(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        update_head8_blocks_pclmul(k, head, data)
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn update_head8_blocks_pclmul(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        // Up to four blocks (a padded payload of up to 64 bytes) straight-line, no loop.
        match data.len() / 16 {
            0 => blocks_n::<0>(k, head, data),
            1 => blocks_n::<1>(k, head, data),
            2 => blocks_n::<2>(k, head, data),
            3 => blocks_n::<3>(k, head, data),
            4 => blocks_n::<4>(k, head, data),
            _ => blocks_any(k, head, data),
        }
    }

    /// `x` moved past one more block.
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn fold_by(k: &FoldKeys, x: __m128i) -> __m128i {
        let fold = _mm_set_epi64x(k.fold[1] as i64, k.fold[0] as i64);
        _mm_xor_si128(
            _mm_clmulepi64_si128::<0x00>(x, fold),
            _mm_clmulepi64_si128::<0x11>(x, fold),
        )
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn load(b: &[u8; 16]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    /// The accumulator after `head` (the end of a block of zeros, which leave a zero register
    /// as it is) and the first block.
    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn head_and(k: &FoldKeys, head: u64, first: Option<&[u8; 16]>) -> __m128i {
        let h = _mm_slli_si128::<8>(_mm_cvtsi64_si128(head as i64));
        match first {
            Some(b) if head != 0 => _mm_xor_si128(fold_by(k, h), load(b)),
            Some(b) => load(b),
            None => h,
        }
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    #[inline]
    fn blocks_n<const N: usize>(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        let data = &data[..16 * N];
        let block = |i: usize| -> &[u8; 16] { data[16 * i..16 * i + 16].try_into().expect("16") };
        let mut x = head_and(k, head, (N > 0).then(|| block(0)));
        for i in 1..N {
            x = _mm_xor_si128(fold_by(k, x), load(block(i)));
        }
        block_reg_pclmul(&k.block, x, _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)))
    }

    #[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
    fn blocks_any(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        let mut blocks = data
            .chunks_exact(16)
            .map(|b| <&[u8; 16]>::try_from(b).expect("a block"));
        let mut x = head_and(k, head, blocks.next());
        for b in blocks {
            x = _mm_xor_si128(fold_by(k, x), load(b));
        }
        block_reg_pclmul(&k.block, x, _mm_slli_si128::<4>(_mm_srli_si128::<8>(x)))
    }

    /// [`update_head8_blocks_pclmul`] (the SSE encoding), `None` without PCLMULQDQ.
    #[cfg(test)]
    pub(super) fn sse_head8(k: &FoldKeys, head: u64, data: &[u8]) -> Option<u32> {
        if !crate::cpu::has_pclmul() {
            return None;
        }
        // SAFETY: PCLMULQDQ and SSE4.1 were just seen.
        unsafe { Some(update_head8_blocks_pclmul(k, head, data)) }
    }

    /// What [`sse_forms`] computes.
    #[cfg(test)]
    pub(super) type SseForms = (u32, u32);

    /// The SSE-encoded forms, whatever the CPU has beyond PCLMULQDQ and SSE4.1 (an AVX2 CPU
    /// takes the VEX-encoded ones otherwise): [`update_block_pclmul`] and
    /// [`update_head8_blocks_pclmul`] of `data` behind the 4-byte head `state`. `None` without
    /// PCLMULQDQ.
    #[cfg(test)]
    pub(super) fn sse_forms(
        k: &FoldKeys,
        block: &[u8; 16],
        state: u32,
        data: &[u8],
    ) -> Option<SseForms> {
        if !crate::cpu::has_pclmul() {
            return None;
        }
        // SAFETY: PCLMULQDQ and SSE4.1 were just seen.
        unsafe {
            Some((
                update_block_pclmul(k, state, block),
                update_head8_blocks_pclmul(k, u64::from(state) << 32, data),
            ))
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod native {
    use super::{BlockKeys, Clmul, FoldKeys, WindowKeys};

    pub(super) fn shifted_block_reg(k: &WindowKeys, x: u128) -> u32 {
        Clmul::portable().shifted_block_reg(k, x)
    }

    pub(super) fn head8_blocks<const N: usize>(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        Clmul::portable().update_head8_blocks(k, head.to_le_bytes(), &data[..16 * N])
    }

    pub(super) fn block_regs_few<const N: usize>(
        keys: &[BlockKeys],
        block: &[u8; 16],
        out: &mut [u32],
    ) {
        Clmul::portable().block_regs(&keys[..N], block, out)
    }

    #[inline(always)]
    pub(super) fn mul(a: u64, b: u64) -> u128 {
        super::portable_mul(a, b)
    }

    pub(super) fn update_blocks(k: &FoldKeys, state: u32, data: &[u8], first_or: u128) -> u32 {
        Clmul::portable()
            .update_blocks_or(k, state, data, first_or)
            .0
    }

    pub(super) fn update_block(k: &FoldKeys, state: u32, block: &[u8; 16]) -> u32 {
        Clmul::portable().update_block(k, state, block)
    }

    pub(super) fn block_regs(keys: &[BlockKeys], block: &[u8; 16], out: &mut [u32]) {
        Clmul::portable().block_regs(keys, block, out)
    }

    pub(super) fn update_head8_blocks(k: &FoldKeys, head: u64, data: &[u8]) -> u32 {
        Clmul::portable().update_head8_blocks(k, head.to_le_bytes(), data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::{Crc32, CRC_INIT, IEEE};
    use proptest::prelude::*;

    const POLYS: [u32; 4] = [0x04C1_1DB7, 0x5D9E_2BB1, 0x1EDC_6F41, 0x1E12_A700];

    #[test]
    fn products_agree() {
        let n = Clmul::detect();
        let p = Clmul::portable();
        let mut s = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..1000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = s.rotate_left(17) ^ 0x5555;
            assert_eq!(n.mul(s, t), p.mul(s, t));
        }
    }

    #[test]
    fn a_block_reduces_to_its_register() {
        let data: Vec<u8> = (0..16u32).map(|i| (i * 73 + 9) as u8).collect();
        for poly in POLYS {
            let c = Crc32::new(poly);
            let k = FoldKeys::new(poly);
            for m in [Clmul::portable(), Clmul::detect()] {
                assert_eq!(m.reduce(&k, load(&data)), c.update(0, &data), "{poly:#x}");
            }
        }
    }

    proptest! {
        /// A block followed by `distance` zero bytes, by four multiplies (both multipliers),
        /// is the register the table-driven engine computes over those bytes.
        #[test]
        fn a_shifted_block_is_its_bytes_and_the_zeros_behind(
            block in proptest::array::uniform16(any::<u8>()),
            distance in 0u32..300,
            pi in 0usize..4,
        ) {
            let poly = POLYS[pi];
            let c = Crc32::new(poly);
            let k = WindowKeys::new(poly, distance);
            let mut bytes = block.to_vec();
            bytes.resize(16 + distance as usize, 0);
            let want = c.update(0, &bytes);
            for m in [Clmul::portable(), Clmul::detect()] {
                prop_assert_eq!(m.shifted_block_reg(&k, load(&block)), want, "{:#x} {}", poly, distance);
            }
        }

        #[test]
        fn blocks_match_the_tables(data in proptest::collection::vec(any::<u8>(), 0..300),
                                   state in any::<u32>(), pi in 0usize..4) {
            let poly = POLYS[pi];
            let c = Crc32::new(poly);
            let k = FoldKeys::new(poly);
            for m in [Clmul::portable(), Clmul::detect()] {
                let (r, rest) = m.update_blocks(&k, state, &data);
                prop_assert_eq!(rest.len(), if data.len() < 16 { data.len() } else { data.len() % 16 });
                prop_assert_eq!(c.update(r, rest), c.update(state, &data));
            }
        }
    }

    proptest! {
        #[test]
        fn a_masked_first_block_is_the_masked_message(
            data in proptest::collection::vec(any::<u8>(), 16..100), mask in any::<u128>()) {
            let k = FoldKeys::new(0x04C1_1DB7);
            let mut masked = data.clone();
            for (b, m) in masked[..16].iter_mut().zip(mask.to_le_bytes()) {
                *b |= m;
            }
            for m in [Clmul::portable(), Clmul::detect()] {
                let (r, rest) = m.update_blocks_or(&k, CRC_INIT, &data, mask);
                prop_assert_eq!(IEEE.update(r, rest), IEEE.update(CRC_INIT, &masked));
            }
        }
    }

    proptest! {
        #[test]
        fn block_reg_is_reduce(x in any::<u128>(), pi in 0usize..4) {
            let poly = POLYS[pi];
            let k = FoldKeys::new(poly);
            let c = Crc32::new(poly);
            let want = c.update_tables(0, &x.to_le_bytes());
            for m in [Clmul::portable(), Clmul::detect()] {
                prop_assert_eq!(m.reduce(&k, x), want);
                prop_assert_eq!(m.block_reg(&k.block, x), want);
                let s = (x >> 64) as u32 ^ 0x5A5A_0F0F;
                prop_assert_eq!(m.update_block(&k, s, &x.to_le_bytes()), c.update_tables(s, &x.to_le_bytes()));
            }
        }
    }

    proptest! {
        /// An 8-byte head and whole blocks (the Append batch's shape), by the CPU's multiply
        /// (both encodings on x86-64) and the portable one, is the table-driven register.
        #[test]
        fn head8_blocks_match_the_tables(head in any::<[u8; 8]>(),
                                         data in proptest::collection::vec(any::<u8>(), 0..=6),
                                         pi in 0usize..4) {
            let poly = POLYS[pi];
            let k = FoldKeys::new(poly);
            let c = Crc32::new(poly);
            let data: Vec<u8> = data.iter().flat_map(|&b| [b, b ^ 0x5A, !b, 7].repeat(4)).collect();
            let want = c.update_tables(c.update_tables(0, &head), &data);
            for m in [Clmul::portable(), Clmul::detect()] {
                prop_assert_eq!(m.update_head8_blocks(&k, head, &data), want);
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(sse) = native::sse_head8(&k, u64::from_le_bytes(head), &data) {
                prop_assert_eq!(sse, want);
            }
            if poly == 0x04C1_1DB7 {
                prop_assert_eq!(IEEE.reg_of_head8_and_blocks(head, &data), want);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    proptest! {
        #[test]
        fn sse_forms_match_the_portable_ones(x in any::<u128>(), state in any::<u32>(),
                                             data in proptest::collection::vec(any::<u8>(), 0..=5),
                                             pi in 0usize..4) {
            let poly = POLYS[pi];
            let k = FoldKeys::new(poly);
            let block = x.to_le_bytes();
            let data: Vec<u8> = data.iter().flat_map(|&b| [b; 16]).collect();
            let p = Clmul::portable();
            if let Some((one, words)) = native::sse_forms(&k, &block, state, &data) {
                prop_assert_eq!(one, p.update_block(&k, state, &block));
                prop_assert_eq!(words, p.update_word_blocks(&k, Some(state.to_le_bytes()), &data));
            }
        }
    }

    #[test]
    fn ieee_check_value_by_folding() {
        let k = FoldKeys::new(0x04C1_1DB7);
        let data = b"123456789abcdefg123456789";
        let (r, rest) = Clmul::detect().update_blocks(&k, CRC_INIT, data);
        assert_eq!(IEEE.update(r, rest), IEEE.update(CRC_INIT, data));
    }
}
