//! Small inline value types shared by the wire, hash and layout modules.

/// Longest key a report may carry: a 13-byte IPv4 5-tuple fits, with room to spare.
pub const MAX_KEY_LEN: usize = 16;
/// Longest Key-Write / Append value: a 5-hop INT path (20 B) or a NetSeer loss event (18 B) fit.
pub const MAX_VALUE_LEN: usize = 32;

/// `src` (at most 32 bytes) zero-padded to 32 bytes, assembled in registers from fixed-size
/// loads (two overlapping loads of the largest power of two that fits, rather than a
/// variable-length `memcpy`; keys and values are 1..=32 bytes and read for every report).
/// The caller stores the result whole: later 16- and 32-byte reads of it are then forwarded
/// from two 16-byte stores. (Writing the overlapping loads straight to a zeroed array left a
/// value of 17..=31 bytes in four stores of which every 16-byte read straddled two, which the
/// CPU cannot forward: an 18-byte Append entry cost more time than its instructions said.)
#[inline(always)]
fn pad32(src: &[u8]) -> [u8; 32] {
    let n = src.len();
    debug_assert!(n <= 32);
    let word = |at: usize| u64::from_le_bytes(src[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u128::from_le_bytes(src[at..at + 16].try_into().expect("16 bytes"));
    // Up to 16 bytes as a little-endian integer: the first and the last (overlapping) word.
    let up_to_16 = |n: usize| -> u128 {
        if n >= 8 {
            word(0) as u128 | (word(n - 8) as u128) << (8 * (n - 8))
        } else if n >= 4 {
            let w = |at: usize| u32::from_le_bytes(src[at..at + 4].try_into().expect("4 bytes"));
            (w(0) as u64 | (w(n - 4) as u64) << (8 * (n - 4))) as u128
        } else {
            src.iter().rev().fold(0, |a, &b| a << 8 | b as u128)
        }
    };
    let (lo, hi) = if n > 16 {
        // The last 16 bytes, moved down so that byte 16 of `src` is byte 0.
        (half(0), half(n - 16) >> (8 * (32 - n)))
    } else {
        (up_to_16(n), 0)
    };
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&lo.to_le_bytes());
    out[16..].copy_from_slice(&hi.to_le_bytes());
    out
}

/// A hash key, stored inline: the exact bytes every hash function of the key's store consumes.
///
/// For reference-profile Key-Write and Key-Increment reports these are the little-endian bytes
/// of the big-endian 32-bit key (the reference reverses them before hashing, §3.3); for
/// reference Postcarding they are the flow-ID bytes as received (§3.6). Extended-profile keys
/// are opaque byte strings, hashed as sent.
///
/// The bytes are kept right-aligned in a 16-byte block, zeros first. A key read from a report
/// is then one 16-byte load of the bytes ending where the key ends, masked, and one 16-byte
/// store ([`Key::from_window`]); the key moves and compares later read it with the same width,
/// so the CPU forwards them from that store (a key assembled from several narrower stores
/// stalls every wider load of it). The leading zeros also let short-key CRCs use fixed table
/// rows (`crc::ShortCrc`, `crc::MultiCrc`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Key {
    len: u8,
    bytes: [u8; MAX_KEY_LEN],
}

/// `TAIL_MASKS[n]` keeps the last `n` bytes of a 16-byte block.
const TAIL_MASKS: [[u8; MAX_KEY_LEN]; MAX_KEY_LEN + 1] = {
    let mut m = [[0u8; MAX_KEY_LEN]; MAX_KEY_LEN + 1];
    let mut n = 0;
    while n <= MAX_KEY_LEN {
        let mut i = MAX_KEY_LEN - n;
        while i < MAX_KEY_LEN {
            m[n][i] = 0xFF;
            i += 1;
        }
        n += 1;
    }
    m
};

impl Key {
    /// The empty key (a placeholder: no report carries one).
    pub const EMPTY: Key = Key {
        len: 0,
        bytes: [0; MAX_KEY_LEN],
    };

    /// A key from 1..=16 bytes; `None` if empty or too long.
    #[inline]
    pub fn new(bytes: &[u8]) -> Option<Key> {
        let n = bytes.len();
        if n == 0 || n > MAX_KEY_LEN {
            return None;
        }
        let mut k = Key {
            len: n as u8,
            bytes: [0; MAX_KEY_LEN],
        };
        k.bytes[MAX_KEY_LEN - n..].copy_from_slice(bytes);
        Some(k)
    }

    /// The key made of the last `len` bytes of `window` (1..=16; `None` otherwise): one
    /// 16-byte load, mask and store. Parsers pass the 16 bytes of a datagram that end where
    /// the key ends.
    #[inline]
    pub fn from_window(window: &[u8; MAX_KEY_LEN], len: usize) -> Option<Key> {
        if len == 0 || len > MAX_KEY_LEN {
            return None;
        }
        // One 16-byte AND (the byte loop compiled to fourteen instructions).
        let bytes =
            (u128::from_ne_bytes(*window) & u128::from_ne_bytes(TAIL_MASKS[len])).to_ne_bytes();
        Some(Key {
            len: len as u8,
            bytes,
        })
    }

    /// The key a reference-profile Key-Write/Key-Increment report with wire key `k` hashes.
    #[inline]
    pub fn from_u32_reference(k: u32) -> Key {
        Key::from_array4(k.to_le_bytes())
    }

    /// A 4-byte key (hot path: no length checks, no `Option`).
    #[inline]
    pub fn from_array4(b: [u8; 4]) -> Key {
        let mut bytes = [0u8; MAX_KEY_LEN];
        bytes[MAX_KEY_LEN - 4..].copy_from_slice(&b);
        Key { len: 4, bytes }
    }

    /// The key bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[MAX_KEY_LEN - self.len as usize..]
    }

    /// Length in bytes (1..=16).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// All 16 bytes: zeros, then the key (fixed-size hashing, see `crc::ShortCrc`).
    #[inline]
    pub fn padded(&self) -> &[u8; MAX_KEY_LEN] {
        &self.bytes
    }
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Key(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A value destined for collector memory, stored inline (0..=32 bytes), already in the byte
/// order it takes in memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Value {
    len: u8,
    bytes: [u8; MAX_VALUE_LEN],
}

impl Value {
    /// The empty value.
    pub const EMPTY: Value = Value {
        len: 0,
        bytes: [0; MAX_VALUE_LEN],
    };

    /// A value from at most 32 bytes; `None` if too long.
    #[inline]
    pub fn new(bytes: &[u8]) -> Option<Value> {
        if bytes.len() > MAX_VALUE_LEN {
            return None;
        }
        Some(Value {
            len: bytes.len() as u8,
            bytes: pad32(bytes),
        })
    }

    /// A 4-byte value (hot path: no length checks, no `Option`).
    #[inline]
    pub fn from_array4(b: [u8; 4]) -> Value {
        Value {
            len: 4,
            bytes: pad32(&b),
        }
    }

    /// The value bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// All 32 bytes: the value, then zeros. Lets hot paths store a value with one fixed-size
    /// copy instead of a variable-length one.
    #[inline]
    pub fn padded(&self) -> &[u8; MAX_VALUE_LEN] {
        &self.bytes
    }

    /// True for a zero-length value.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl core::fmt::Debug for Value {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Value(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length 0..=32, at every offset in a larger buffer: the value's bytes, then zeros.
    #[test]
    fn value_new_pads_every_length_with_zeros() {
        let data: Vec<u8> = (1..=80u8).collect();
        for len in 0..=MAX_VALUE_LEN {
            for at in 0..8 {
                let src = &data[at..at + len];
                let v = Value::new(src).unwrap();
                assert_eq!(v.as_bytes(), src, "len {len} at {at}");
                assert!(
                    v.padded()[len..].iter().all(|&b| b == 0),
                    "len {len} at {at}"
                );
            }
        }
        assert_eq!(Value::new(&[7; 33]), None);
    }

    #[test]
    fn key_from_window_equals_key_new() {
        let data: Vec<u8> = (1..=40u8).collect();
        for len in 1..=MAX_KEY_LEN {
            for end in MAX_KEY_LEN..=data.len() {
                let w: &[u8; MAX_KEY_LEN] = data[end - MAX_KEY_LEN..end].try_into().unwrap();
                let k = Key::from_window(w, len).unwrap();
                assert_eq!(k, Key::new(&data[end - len..end]).unwrap());
                assert_eq!(k.as_bytes(), &data[end - len..end]);
                assert!(k.padded()[..MAX_KEY_LEN - len].iter().all(|&b| b == 0));
            }
        }
        assert!(Key::from_window(&[0; MAX_KEY_LEN], 0).is_none());
        assert!(Key::from_window(&[0; MAX_KEY_LEN], 17).is_none());
        assert_eq!(
            Key::from_u32_reference(0x0102_0304).as_bytes(),
            &[4, 3, 2, 1]
        );
    }

    #[test]
    fn short_copies_of_every_length() {
        let src: Vec<u8> = (1..=32u8).collect();
        for n in 0..=32 {
            let v = Value::new(&src[..n]).unwrap();
            assert_eq!(v.as_bytes(), &src[..n]);
            assert!(v.padded()[n..].iter().all(|&b| b == 0), "{n}");
            if (1..=16).contains(&n) {
                let k = Key::new(&src[..n]).unwrap();
                assert_eq!(k.as_bytes(), &src[..n]);
            }
        }
    }

    #[test]
    fn key_bounds() {
        assert!(Key::new(&[]).is_none());
        assert!(Key::new(&[0; 17]).is_none());
        assert_eq!(Key::new(&[1, 2, 3]).unwrap().as_bytes(), &[1, 2, 3]);
        assert_eq!(
            Key::from_u32_reference(0x0A00_0001).as_bytes(),
            &[1, 0, 0, 0x0A]
        );
        assert!(Value::new(&[0; 33]).is_none());
        assert_eq!(
            Key::from_array4([1, 2, 3, 4]),
            Key::new(&[1, 2, 3, 4]).unwrap()
        );
        assert_eq!(
            Value::from_array4([1, 2, 3, 4]),
            Value::new(&[1, 2, 3, 4]).unwrap()
        );
        assert_eq!(Value::new(&[9; 20]).unwrap().len(), 20);
        let v = Value::new(&[9; 20]).unwrap();
        assert_eq!(&v.padded()[..20], &[9; 20]);
        assert!(v.padded()[20..].iter().all(|&b| b == 0));
    }
}
