//! Reflected CRC-32 with any polynomial, as Tofino's hash engine computes it: by tables, and by
//! carry-less multiplication where the CPU has it.
//!
//! Every CRC in DTA is *reflected* with init `0xFFFF_FFFF` and final XOR `0xFFFF_FFFF`: the IEEE
//! CRC-32 of the ICRC and the reference Key-Write hash, the reference Postcarding hop hashes and
//! the `independent` hash profile's per-replica polynomials. On Tofino this is
//! `CRCPolynomial<bit<32>>(coeff, reversed = true, msb = false, extended = false,
//! init = 0xFFFFFFFF, xor = 0xFFFFFFFF)`.
//!
//! The tables are built at compile time. Slicing-by-16 handles 16 bytes per step, which keeps
//! short inputs (4–16 byte keys) at a few nanoseconds. From 32 bytes on, [`Crc32::update`]
//! folds 16-byte blocks by carry-less multiplication ([`fold`]) when the CPU has it, for every
//! polynomial (`crc32fast` does so only for IEEE and only from 128 bytes, anchors §B.4), and
//! finishes the last few bytes by the tables; both ways give the same register. Exactly 16
//! bytes are one block reduced by three multiplies.
//!
//! A padded payload of whole blocks ([`Crc32::reg_of_word_and_blocks`]) folds straight-line.
//!
//! Keys (at most 16 bytes) are hashed by the tables' linearity ([`MultiCrc`], [`ShortCrc`]):
//! sixteen independent loads per key. Hashing them by carry-less multiplication instead (three
//! dependent multiplies per polynomial) took fewer instructions (Key-Write N = 2: about 50
//! against 90) but measured 5-12 % fewer reports per second on the pipeline (paired, pinned,
//! issue 30): the multiplies' latency sits on every report's critical path, the table loads
//! overlap.
//!
//! The API exposes the raw register (`update`) so callers can precompute the CRC of a constant
//! prefix once (per connection) and resume from it per packet.

pub mod fold;

/// A reflected CRC-32 engine for one polynomial (given in normal, MSB-first form).
pub struct Crc32 {
    table: [[u32; 256]; 16],
    poly: u32,
    keys: fold::FoldKeys,
}

/// Register value before any input (the CRC "init").
pub const CRC_INIT: u32 = 0xFFFF_FFFF;

impl Crc32 {
    /// Builds the slicing-by-16 tables for `poly` (normal form, e.g. `0x04C1_1DB7`).
    pub const fn new(poly: u32) -> Self {
        let rpoly = poly.reverse_bits();
        let mut table = [[0u32; 256]; 16];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ rpoly } else { c >> 1 };
                k += 1;
            }
            table[0][i] = c;
            i += 1;
        }
        let mut t = 1;
        while t < 16 {
            let mut i = 0;
            while i < 256 {
                let prev = table[t - 1][i];
                table[t][i] = (prev >> 8) ^ table[0][(prev & 0xFF) as usize];
                i += 1;
            }
            t += 1;
        }
        Crc32 {
            table,
            poly,
            keys: fold::FoldKeys::new(poly),
        }
    }

    /// The polynomial in normal (MSB-first) form, without the x^32 term.
    #[inline]
    pub const fn poly(&self) -> u32 {
        self.poly
    }

    /// Feeds `data` into the raw register `state` and returns the new register.
    ///
    /// Start from [`CRC_INIT`]; the final CRC is `!state` (see [`Crc32::finish`]). Exactly 16
    /// bytes (an atomic's operands) take [`fold::Clmul::update_block`] when the CPU has a
    /// carry-less multiply (about 25 instructions, against about 70 by the tables); always
    /// inlined, so callers of other or constant lengths keep their branch-free code.
    #[inline(always)]
    pub fn update(&self, state: u32, data: &[u8]) -> u32 {
        let m = fold::Clmul::detect();
        // Exactly one block (an atomic's operands): three multiplies, no tables.
        if let (Ok(block), true) = (<&[u8; 16]>::try_from(data), m.is_native()) {
            return m.update_block(&self.keys, state, block);
        }
        if data.len() >= FOLD_MIN_LEN && m.is_native() {
            let (reg, rest) = m.update_blocks(&self.keys, state, data);
            return if rest.is_empty() {
                reg
            } else {
                self.update_tables(reg, rest)
            };
        }
        self.update_tables(state, data)
    }

    /// [`Crc32::update`] of `data` with `first_or` ORed into its first 16 bytes (a
    /// little-endian mask), without copying it: masked header bytes, as the ICRC's.
    ///
    /// # Panics
    /// If `data` is shorter than 16 bytes.
    #[inline]
    pub fn update_or_first(&self, state: u32, data: &[u8], first_or: u128) -> u32 {
        if data.len() >= FOLD_MIN_LEN {
            let m = fold::Clmul::detect();
            if m.is_native() {
                let (reg, rest) = m.update_blocks_or(&self.keys, state, data, first_or);
                return self.update_tables(reg, rest);
            }
        }
        let (head, rest) = data.split_first_chunk::<16>().expect("16 bytes or more");
        let head = (u128::from_le_bytes(*head) | first_or).to_le_bytes();
        self.update_tables(self.update_tables(state, &head), rest)
    }

    /// The register from zero over `head` (if given) and then `data`, as
    /// `update(update(0, head), data)`: when `data` is whole 16-byte blocks and the CPU has a
    /// carry-less multiply, every block (the head as the end of one more) is folded and the
    /// register reduced from it by three multiplies, with no tables and no loop (a 32-byte
    /// Key-Write slot: about 30 instructions, where the general fold with its table-driven
    /// immediate took about 80). Other lengths, and CPUs without the multiply, take
    /// [`Crc32::update`]; the result is the same.
    #[inline]
    pub fn reg_of_word_and_blocks(&self, head: Option<[u8; 4]>, data: &[u8]) -> u32 {
        let m = fold::Clmul::detect();
        if data.len() % 16 == 0 && m.is_native() {
            return m.update_word_blocks(&self.keys, head, data);
        }
        let reg = head.map_or(0, |h| self.update_tables(0, &h));
        self.update(reg, data)
    }

    /// The folding constants of this polynomial.
    #[inline]
    pub(crate) fn keys(&self) -> &fold::FoldKeys {
        &self.keys
    }

    /// The register from zero over the 8 bytes `head` and then `data`, as
    /// `update(update(0, head), data)`: when `data` is whole 16-byte blocks and the CPU has a
    /// carry-less multiply, every block (the head as the end of one more) is folded, with no
    /// tables (an Append batch of 16-byte multiples and its 8-byte trailer). Otherwise
    /// [`Crc32::update`]; the result is the same.
    #[inline]
    pub fn reg_of_head8_and_blocks(&self, head: [u8; 8], data: &[u8]) -> u32 {
        let m = fold::Clmul::detect();
        if data.len() % 16 == 0 && m.is_native() {
            return m.update_head8_blocks(&self.keys, head, data);
        }
        self.update(self.update_tables(0, &head), data)
    }

    /// [`Crc32::update`] by the slicing-by-16 tables alone.
    #[inline]
    pub fn update_tables(&self, mut state: u32, data: &[u8]) -> u32 {
        let t = &self.table;
        let mut chunks = data.chunks_exact(16);
        for c in &mut chunks {
            let a = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ state;
            state = t[15][(a & 0xFF) as usize]
                ^ t[14][((a >> 8) & 0xFF) as usize]
                ^ t[13][((a >> 16) & 0xFF) as usize]
                ^ t[12][(a >> 24) as usize]
                ^ t[11][c[4] as usize]
                ^ t[10][c[5] as usize]
                ^ t[9][c[6] as usize]
                ^ t[8][c[7] as usize]
                ^ t[7][c[8] as usize]
                ^ t[6][c[9] as usize]
                ^ t[5][c[10] as usize]
                ^ t[4][c[11] as usize]
                ^ t[3][c[12] as usize]
                ^ t[2][c[13] as usize]
                ^ t[1][c[14] as usize]
                ^ t[0][c[15] as usize];
        }
        let mut rest = chunks.remainder();
        if rest.len() >= 8 {
            let a = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) ^ state;
            state = t[7][(a & 0xFF) as usize]
                ^ t[6][((a >> 8) & 0xFF) as usize]
                ^ t[5][((a >> 16) & 0xFF) as usize]
                ^ t[4][(a >> 24) as usize]
                ^ t[3][rest[4] as usize]
                ^ t[2][rest[5] as usize]
                ^ t[1][rest[6] as usize]
                ^ t[0][rest[7] as usize];
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            let a = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) ^ state;
            state = t[3][(a & 0xFF) as usize]
                ^ t[2][((a >> 8) & 0xFF) as usize]
                ^ t[1][((a >> 16) & 0xFF) as usize]
                ^ t[0][(a >> 24) as usize];
            rest = &rest[4..];
        }
        for &b in rest {
            state = (state >> 8) ^ t[0][((state ^ b as u32) & 0xFF) as usize];
        }
        state
    }

    /// Feeds one byte into the raw register.
    #[inline]
    pub fn update_byte(&self, state: u32, b: u8) -> u32 {
        (state >> 8) ^ self.table[0][((state ^ b as u32) & 0xFF) as usize]
    }

    /// Turns a raw register into the CRC value (final XOR).
    #[inline]
    pub const fn finish(state: u32) -> u32 {
        !state
    }

    /// The CRC of `data` (init and final XOR `0xFFFF_FFFF`).
    #[inline]
    pub fn checksum(&self, data: &[u8]) -> u32 {
        !self.update(CRC_INIT, data)
    }
}

/// For each input length `len` in `0..=MULTI_MAX_LEN`, the share of the initial register in the
/// CRC of a `len`-byte input under `poly` (normal form): the all-ones register moved past `len`
/// zero bytes, inverted. The CRC of an input held right-aligned behind zeros in a 16-byte block
/// is this XOR the register of the block from zero (the register is linear in the input, and
/// leading zeros leave a zero register unchanged), which is how [`MultiCrc`], [`ShortCrc`] and
/// the carry-less key hashes compute it.
pub const fn length_bases(poly: u32) -> [u32; MULTI_MAX_LEN + 1] {
    let rpoly = poly.reverse_bits();
    let mut base = [0u32; MULTI_MAX_LEN + 1];
    let mut reg = CRC_INIT;
    let mut len = 0;
    while len <= MULTI_MAX_LEN {
        base[len] = !reg;
        let mut bit = 0;
        while bit < 8 {
            reg = if reg & 1 != 0 {
                (reg >> 1) ^ rpoly
            } else {
                reg >> 1
            };
            bit += 1;
        }
        len += 1;
    }
    base
}

/// Lanes of a [`MultiCrc`]: polynomials computed together.
pub const LANES: usize = 8;

/// Longest input a [`MultiCrc`] takes (the longest key).
pub const MULTI_MAX_LEN: usize = 16;

/// Up to [`LANES`] CRC-32 checksums (init all ones, final inversion) of one short input at once.
///
/// A CRC register is linear in the input: after `L` bytes it is `A^L(init) ^ Σ A^(L-1-i)(T[b_i])`
/// with `A` the one-byte register shift and `T` the byte table. Tabulating `A^d(T[b])` by the
/// byte's distance `d` from the end, for every lane side by side, turns the checksums of a key
/// under eight polynomials into one table row XOR per key byte, instead of eight table-driven
/// passes over the key. A row entry holds two lanes per 64-bit word (`W = L / 2` words), so a
/// key byte costs `W` word XORs whatever the compiler makes of the lanes (left to itself it
/// split the 32-bit lanes apart and spilled them). Tables are 128 KiB for eight lanes, built once.
pub struct MultiCrc<const L: usize = LANES, const W: usize = { LANES / 2 }> {
    rows: Box<[Row<W>; MULTI_MAX_LEN]>,
    base: [[u64; W]; MULTI_MAX_LEN + 1],
}

/// One key position's table, followed by a cache line of padding: a row is a multiple of
/// 4 KiB, so without it the entry for a byte value sat in the same L1 set in every row, and a
/// key with repeated bytes (zeros in addresses, equal octets) made up to 16 loads compete for
/// one 8-way set on every report.
#[derive(Clone)]
#[repr(C)]
struct Row<const W: usize> {
    t: [[u64; W]; 256],
    _pad: [u8; 64],
}

/// Sets lane `lane` of a word-packed entry (lanes `2i` and `2i + 1` share word `i`).
#[inline]
fn set_lane<const W: usize>(e: &mut [u64; W], lane: usize, v: u32) {
    let shift = 32 * (lane % 2);
    let w = &mut e[lane / 2];
    *w = (*w & !(0xFFFF_FFFFu64 << shift)) | (v as u64) << shift;
}

impl<const L: usize, const W: usize> MultiCrc<L, W> {
    /// Lanes for `polys` (at most `L`; unused lanes compute nothing useful).
    ///
    /// # Panics
    /// If more than `L` polynomials are given, or `W` is not `L / 2` with `L` even.
    pub fn new(polys: &[u32]) -> MultiCrc<L, W> {
        assert!(L % 2 == 0 && W * 2 == L, "two lanes per word");
        assert!(polys.len() <= L, "too many lanes");
        let empty = Row {
            t: [[0u64; W]; 256],
            _pad: [0; 64],
        };
        let rows: Box<[Row<W>]> = vec![empty; MULTI_MAX_LEN].into_boxed_slice();
        let mut rows: Box<[Row<W>; MULTI_MAX_LEN]> = rows.try_into().ok().expect("sixteen rows");
        let mut base = [[0u64; W]; MULTI_MAX_LEN + 1];
        let r = &mut *rows;
        for (lane, &poly) in polys.iter().enumerate() {
            let c = Crc32::new(poly);
            for b in 0..256 {
                let mut reg = c.table[0][b];
                // Row k serves a byte at distance MULTI_MAX_LEN - 1 - k from the end, so a
                // `len`-byte input uses rows `MULTI_MAX_LEN - len..` in input order.
                for row in r.iter_mut().rev() {
                    set_lane(&mut row.t[b], lane, reg);
                    reg = c.update_byte(reg, 0);
                }
            }
            for (len_base, &b) in base.iter_mut().zip(&length_bases(poly)) {
                set_lane(len_base, lane, b);
            }
        }
        MultiCrc { rows, base }
    }

    /// Unpacks the word-packed lanes.
    #[inline(always)]
    fn lanes(acc: [u64; W]) -> [u32; L] {
        core::array::from_fn(|i| (acc[i / 2] >> (32 * (i % 2))) as u32)
    }

    /// The checksum of `data` under every lane's polynomial.
    ///
    /// # Panics
    /// If `data` is longer than [`MULTI_MAX_LEN`].
    #[inline]
    pub fn checksums(&self, data: &[u8]) -> [u32; L] {
        let len = data.len();
        let mut acc = self.base[len];
        let rows = &self.rows[MULTI_MAX_LEN - len..];
        for (&b, row) in data.iter().zip(rows) {
            let t = &row.t[b as usize];
            for w in 0..W {
                acc[w] ^= t[w];
            }
        }
        Self::lanes(acc)
    }

    /// [`MultiCrc::checksums`] of `block[16 - len..]`, whose leading bytes are zero (a
    /// [`crate::Key`]'s padded block): always sixteen rows, so there is no length to loop on;
    /// the zeros add nothing. On x86-64 each row entry is XORed in with 16-byte vector XORs
    /// (SSE2, which every x86-64 CPU has; left to itself the compiler used two 64-bit XORs
    /// per word and computed the lanes one after another).
    ///
    /// # Panics
    /// If `len` is above 16.
    #[inline(always)]
    pub fn checksums_padded(&self, block: &[u8; MULTI_MAX_LEN], len: usize) -> [u32; L] {
        debug_assert!(block[..MULTI_MAX_LEN - len].iter().all(|&b| b == 0));
        #[cfg(target_arch = "x86_64")]
        if W == 2 || W == 4 {
            // Keys of at most 8 bytes (the reference profile's 4-byte keys) fold only the
            // last eight rows: the others would XOR the zero entries of leading zeros.
            let (rows, base) = (&*self.rows, &self.base[len]);
            if len <= 8 {
                let r = rows.last_chunk::<8>().expect("sixteen rows");
                let b = block.last_chunk::<8>().expect("sixteen bytes");
                return Self::lanes(sse::fold_rows(r, base, b));
            }
            return Self::lanes(sse::fold_rows(rows, base, block));
        }
        let mut acc = self.base[len];
        let rows = &*self.rows;
        for j in 0..MULTI_MAX_LEN {
            let t = &rows[j].t[block[j] as usize];
            for w in 0..W {
                acc[w] ^= t[w];
            }
        }
        Self::lanes(acc)
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod sse {
    use core::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_setzero_si128, _mm_storeu_si128, _mm_xor_si128,
    };

    use super::Row;

    /// `base` XOR the rows' entries for `block`'s bytes, for entries of 2 or 4 words, with
    /// SSE2 XORs.
    #[inline(always)]
    pub(super) fn fold_rows<const W: usize, const N: usize>(
        rows: &[Row<W>; N],
        base: &[u64; W],
        block: &[u8; N],
    ) -> [u64; W] {
        assert!(W == 2 || W == 4);
        let load = |p: &[u64]| -> __m128i {
            let p: &[u64; 2] = p.try_into().expect("two words");
            // SAFETY: `p` is 16 readable bytes; the load is unaligned; SSE2 is part of the
            // x86-64 baseline.
            unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
        };
        // SAFETY (each block below): SSE2 is part of the x86-64 baseline.
        let mut a0 = load(&base[..2]);
        let mut a1 = if W == 4 {
            load(&base[2..])
        } else {
            unsafe { _mm_setzero_si128() }
        };
        for (row, &b) in rows.iter().zip(block) {
            let e = &row.t[b as usize];
            a0 = unsafe { _mm_xor_si128(a0, load(&e[..2])) };
            if W == 4 {
                a1 = unsafe { _mm_xor_si128(a1, load(&e[2..])) };
            }
        }
        let mut out = [0u64; W];
        let store = |p: &mut [u64], v: __m128i| {
            let p: &mut [u64; 2] = p.try_into().expect("two words");
            // SAFETY: `p` is 16 writable bytes; the store is unaligned; SSE2 is baseline.
            unsafe { _mm_storeu_si128(p.as_mut_ptr().cast(), v) }
        };
        store(&mut out[..2], a0);
        if W == 4 {
            store(&mut out[2..], a1);
        }
        out
    }
}

impl<const L: usize, const W: usize> core::fmt::Debug for MultiCrc<L, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("MultiCrc")
    }
}

/// The CRC-32 (init all ones, final inversion) of one polynomial over a key of at most 16
/// bytes held right-aligned in a 16-byte block (zeros first, as `Key` stores it), as sixteen
/// independent table loads.
///
/// Same linearity as [`MultiCrc`]: block byte `j` lies `15 - j` bytes from the end whatever
/// the key's length, so it always XORs row `j`, and the leading zeros add nothing (a zero byte's
/// row entry is zero). Only the initial register's share depends on the length. No branches:
/// sixteen byte loads and sixteen table XORs, none depending on another, where a table-driven
/// CRC chains one load per step. Used where a key's hash is on the critical path of every
/// report (the Postcarding cache index). Tables are 16 KiB.
pub struct ShortCrc {
    rows: Box<[[u32; 256]; MULTI_MAX_LEN]>,
    base: [u32; MULTI_MAX_LEN + 1],
}

impl ShortCrc {
    /// The tables for `poly` (normal form).
    pub fn new(poly: u32) -> ShortCrc {
        let c = Crc32::new(poly);
        let rows: Box<[[u32; 256]]> = vec![[0u32; 256]; MULTI_MAX_LEN].into_boxed_slice();
        let mut rows: Box<[[u32; 256]; MULTI_MAX_LEN]> = rows.try_into().expect("sixteen rows");
        for b in 0..256 {
            let mut reg = c.table[0][b];
            for row in rows.iter_mut().rev() {
                row[b] = reg;
                reg = c.update_byte(reg, 0);
            }
        }
        ShortCrc {
            rows,
            base: length_bases(poly),
        }
    }

    /// The checksum of `block[16 - len..]`; `block[..16 - len]` must be zero.
    ///
    /// # Panics
    /// If `len` is above 16.
    #[inline(always)]
    pub fn checksum_padded(&self, block: &[u8; MULTI_MAX_LEN], len: usize) -> u32 {
        debug_assert!(block[..MULTI_MAX_LEN - len].iter().all(|&b| b == 0));
        /// The last `N` rows' entries for the last `N` bytes (a fixed count: unrolled).
        #[inline(always)]
        fn fold<const N: usize>(rows: &[[u32; 256]; N], block: &[u8; N]) -> u32 {
            let (mut even, mut odd) = (0, 0);
            for i in (0..N).step_by(2) {
                even ^= rows[i][block[i] as usize];
                odd ^= rows[i + 1][block[i + 1] as usize];
            }
            even ^ odd
        }
        let rows = &*self.rows;
        // Short keys (the reference profile's 4-byte flows) skip the rows of their leading
        // zeros, whose entries are zero.
        let shares = match len {
            0..=4 => fold::<4>(
                rows.last_chunk().expect("sixteen rows"),
                block.last_chunk().expect("sixteen bytes"),
            ),
            5..=8 => fold::<8>(
                rows.last_chunk().expect("sixteen rows"),
                block.last_chunk().expect("sixteen bytes"),
            ),
            _ => fold::<MULTI_MAX_LEN>(rows, block),
        };
        self.base[len] ^ shares
    }
}

impl core::fmt::Debug for ShortCrc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ShortCrc")
    }
}

/// IEEE 802.3 CRC-32 (zlib's `crc32`): the ICRC, and the reference profile's hashes.
pub static IEEE: Crc32 = Crc32::new(IEEE_POLY);

/// The IEEE 802.3 polynomial (Ethernet, the RoCEv2 ICRC).
pub(crate) const IEEE_POLY: u32 = 0x04C1_1DB7;

/// From this length on, inputs are folded by carry-less multiplication when the CPU has it
/// ([`fold`]): two multiplies per 16 bytes against about 35 table instructions, plus a fixed
/// reduction that shorter inputs do not earn back (a 32-byte Key-Write slot: about 45
/// instructions folded, 97 by the tables).
const FOLD_MIN_LEN: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    fn bitwise(poly: u32, data: &[u8]) -> u32 {
        let r = poly.reverse_bits();
        let mut c = 0xFFFF_FFFFu32;
        for &b in data {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ r } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn ieee_check_value() {
        // The catalogue "check" value of CRC-32/ISO-HDLC.
        assert_eq!(IEEE.checksum(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn slicing_matches_bitwise_for_every_length() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        let other = Crc32::new(0x5D9E_2BB1);
        for len in 0..data.len() {
            assert_eq!(
                IEEE.checksum(&data[..len]),
                bitwise(0x04C1_1DB7, &data[..len])
            );
            assert_eq!(
                other.checksum(&data[..len]),
                bitwise(0x5D9E_2BB1, &data[..len])
            );
            // Resuming from a register (long tails take the carry-less-multiply path).
            let k = len / 3;
            let reg = IEEE.update(IEEE.update(CRC_INIT, &data[..k]), &data[k..len]);
            assert_eq!(Crc32::finish(reg), bitwise(0x04C1_1DB7, &data[..len]));
        }
    }

    #[test]
    fn multi_lanes_match_single_engines() {
        let polys = [
            0x04C1_1DB7,
            0x5D9E_2BB1,
            0x1EDC_6F41,
            0x741B_8CD7,
            0x32583499,
        ];
        let m = MultiCrc::<8, 4>::new(&polys);
        let data: Vec<u8> = (0..16u32).map(|i| (i * 97 + 5) as u8).collect();
        for len in 0..=MULTI_MAX_LEN {
            let got = m.checksums(&data[..len]);
            let mut block = [0u8; MULTI_MAX_LEN];
            block[MULTI_MAX_LEN - len..].copy_from_slice(&data[..len]);
            let padded = m.checksums_padded(&block, len);
            for (lane, &p) in polys.iter().enumerate() {
                assert_eq!(got[lane], bitwise(p, &data[..len]), "poly {p:#x} len {len}");
                assert_eq!(padded[lane], got[lane], "padded, poly {p:#x} len {len}");
            }
        }
    }

    #[test]
    fn short_crc_matches_bitwise_for_every_length() {
        let data: Vec<u8> = (0..16u32).map(|i| (i * 151 + 3) as u8).collect();
        for poly in [0x04C1_1DB7, 0xEED6_2101] {
            let s = ShortCrc::new(poly);
            for len in 1..=MULTI_MAX_LEN {
                let mut block = [0u8; MULTI_MAX_LEN];
                block[MULTI_MAX_LEN - len..].copy_from_slice(&data[..len]);
                assert_eq!(
                    s.checksum_padded(&block, len),
                    bitwise(poly, &data[..len]),
                    "poly {poly:#x} len {len}"
                );
            }
        }
    }

    /// The raw register after `data` from `reg`, one bit at a time from the definition.
    fn bitwise_reg(poly: u32, mut reg: u32, data: &[u8]) -> u32 {
        let r = poly.reverse_bits();
        for &b in data {
            reg ^= b as u32;
            for _ in 0..8 {
                reg = if reg & 1 != 0 {
                    (reg >> 1) ^ r
                } else {
                    reg >> 1
                };
            }
        }
        reg
    }

    /// Every polynomial a lane uses: the independent profile's (spares included), IEEE and
    /// the reference hop polynomials (some without the x^0 term).
    fn lane_polys() -> Vec<u32> {
        let mut p = crate::hash::POLYNOMIALS.to_vec();
        p.push(IEEE_POLY);
        p.extend_from_slice(&crate::hash::REFERENCE_HOP_POLYNOMIALS);
        p
    }

    proptest::proptest! {
        #[test]
        fn word_and_blocks_match_tables_and_bitwise(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=80),
            head in proptest::option::of(proptest::prelude::any::<[u8; 4]>()),
            whole in proptest::prelude::any::<bool>(), pi in 0usize..38,
        ) {
            // Half the cases cut to whole blocks (0, 16, 32, 48, 64 or 80 bytes).
            let data = if whole { &data[..data.len() / 16 * 16] } else { &data[..] };
            let poly = lane_polys()[pi];
            let c = if poly == IEEE_POLY { &IEEE } else { &*Box::new(Crc32::new(poly)) };
            let h = head.unwrap_or_default();
            let want = bitwise_reg(poly, bitwise_reg(poly, 0, head.as_ref().map_or(&[][..], |h| &h[..])), data);
            proptest::prop_assert_eq!(c.update_tables(c.update_tables(0, &h), data), want);
            proptest::prop_assert_eq!(c.reg_of_word_and_blocks(head, data), want);
            if data.len() % 16 == 0 {
                for m in [fold::Clmul::portable(), fold::Clmul::detect()] {
                    proptest::prop_assert_eq!(m.update_word_blocks(&c.keys, head, data), want);
                }
            }
        }
    }

    #[test]
    fn resume_from_prefix_state() {
        let data = b"constant prefix | variable tail";
        let s = IEEE.update(CRC_INIT, &data[..16]);
        assert_eq!(
            Crc32::finish(IEEE.update(s, &data[16..])),
            IEEE.checksum(data)
        );
        let s2 = data[..16]
            .iter()
            .fold(CRC_INIT, |s, &b| IEEE.update_byte(s, b));
        assert_eq!(s, s2);
    }
}
