//! The store metadata record a collector SENDs right after the RDMA_CM handshake.
//!
//! Once the RTU has established the connection, the collector posts one RC SEND carrying a
//! [`MetaRecord`]: everything the translator needs to write into the store the connection
//! serves (address, length, R_Key, primitive and layout). The QPN and PSNs come from the CM
//! REQ/REP, and the store's name from configuration, so neither is in the record.
//!
//! # Layout (versions 1 and 2, 64 bytes, little-endian)
//!
//! | Offset | Size | Field | Value |
//! |---:|---:|---|---|
//! | 0 | 4 | magic | ASCII `DTAM` (`44 54 41 4D`) |
//! | 4 | 1 | version | 2 if the record carries a redundancy N (byte 39), otherwise 1 |
//! | 5 | 1 | kind | 1 Key-Write, 2 Append, 3 Key-Increment, 4 Postcarding, 5 Sketch-Merge (its fields: `PROTOCOL.md`, "Collector metadata record") |
//! | 6 | 1 | hash profile | 0 `reference`, 1 `independent`; 0 for Append (no hash) |
//! | 7 | 1 | flags | bit 0: the collector verifies the ICRC; bit 1: Append format is `sequenced` (0 = `reference`; must be 0 for other kinds); bit 2: list-head messages follow this record (sequenced Append only, see [`crate::wire::listheads`]); bits 3–7 zero |
//! | 8 | 8 | address | virtual address of the region's first byte (u64) |
//! | 16 | 8 | length | region length in bytes (u64) |
//! | 24 | 4 | R_Key | the MR's **remote** key (u32); the reference sent the lkey |
//! | 28 | 4 | slot/entry size | Key-Write: bytes per slot; Key-Increment: 8; Append: bytes per entry; Postcarding: 0 |
//! | 32 | 4 | count | Key-Write / Key-Increment: slots; Append: ring capacity in entries per list; Postcarding: chunks |
//! | 36 | 2 | batch | Append: entries per RDMA WRITE; otherwise 0 |
//! | 38 | 1 | hops | Postcarding: hop bound B; otherwise 0 |
//! | 39 | 1 | redundancy | version 2: the store's N, 1..=8 (Key-Write, Key-Increment, Postcarding); version 1: reserved, 0 |
//! | 40 | 4 | lists | Append: lists in the store; otherwise 0 |
//! | 44 | 4 | first list | Append: global ID of the store's first list; otherwise 0 |
//! | 48 | 8 | list stride | Append: bytes between the starts of consecutive lists; otherwise 0 |
//! | 56 | 4 | reserved | 0 |
//! | 60 | 4 | CRC | IEEE CRC-32 (zlib `crc32`) of bytes 0–59, as a little-endian u32 |
//!
//! A receiver checks, in order: length ≥ 64 ([`Error::Truncated`]), magic
//! ([`Error::Malformed`]), version 1 or 2 ([`Error::UnsupportedVersion`]), CRC
//! ([`Error::Malformed`]), kind ([`Error::UnknownOpcode`]), then that the hash profile is known,
//! every flag, field and reserved byte the kind does not use is zero, and byte 39 is 0 in
//! version 1 and N in 1..=8 in version 2 (a version-2 Append record is malformed: Append has
//! no N) ([`Error::Malformed`]). Bytes after the first 64 are ignored. Layout parameters are
//! carried as given; whether they describe a valid layout (power-of-two slot counts, batch
//! bounds, …) is for `crate::layout` to decide.
//!
//! **Version 2** gives the reserved byte 39 a meaning, the store's redundancy N, so a
//! translator learns the N the store's queries will read (issue 16). A writer emits version 2
//! exactly when the record carries N, and version 1 otherwise (Append stores, stores that
//! record none), so parsing and emitting are inverse and an older version-1-only translator
//! still connects to Append stores; it refuses version-2 records as an unsupported version
//! instead of ignoring an N it does not know about. Version-1 records still parse, with no N.
//!
//! The reference collector's 16-byte record is [`ReferenceMetaRecord`].

use super::{Error, Result};
use crate::crc::IEEE;
use crate::hash::HashProfile;
use crate::layout::AppendFormat;
use crate::meta::{Redundancy, StoreKind, StoreMeta};

/// Bytes in a [`MetaRecord`].
pub const META_RECORD_LEN: usize = 64;
/// The record's magic, ASCII `DTAM`.
pub const META_MAGIC: [u8; 4] = *b"DTAM";
/// The newest record version this module reads and writes: a record that carries a
/// redundancy N (byte 39).
pub const META_VERSION: u8 = 2;
/// The record version without a redundancy N (byte 39 reserved); still read and written.
pub const META_VERSION_1: u8 = 1;
/// Bytes in a [`ReferenceMetaRecord`].
pub const REFERENCE_META_LEN: usize = 16;

/// Values of the `kind` byte.
pub mod kind {
    /// Key-Write.
    pub const KEY_WRITE: u8 = 1;
    /// Append.
    pub const APPEND: u8 = 2;
    /// Key-Increment.
    pub const KEY_INCREMENT: u8 = 3;
    /// Postcarding.
    pub const POSTCARD: u8 = 4;
    /// Sketch-Merge.
    pub const SKETCH: u8 = 5;
}

/// Bits of the `flags` byte.
pub mod flags {
    /// The collector verifies the ICRC, so the translator must compute it.
    pub const VERIFY_ICRC: u8 = 1 << 0;
    /// Append only: the rings use the `sequenced` format.
    pub const APPEND_SEQUENCED: u8 = 1 << 1;
    /// Sequenced Append only: the collector SENDs the lists' next batch numbers
    /// ([`crate::wire::listheads`]) right after this record, so a new writer resumes each list.
    pub const LIST_HEADS: u8 = 1 << 2;
}

/// Bytes of a Key-Increment counter, the only slot size that kind has.
const COUNTER_LEN: u32 = 8;

mod field {
    pub type Field = core::ops::Range<usize>;

    pub const MAGIC: Field = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    pub const HASH: usize = 6;
    pub const FLAGS: usize = 7;
    pub const ADDR: Field = 8..16;
    pub const LEN: Field = 16..24;
    pub const RKEY: Field = 24..28;
    pub const SLOT_SIZE: Field = 28..32;
    pub const COUNT: Field = 32..36;
    pub const BATCH: Field = 36..38;
    pub const HOPS: usize = 38;
    pub const REDUNDANCY: usize = 39;
    pub const LISTS: Field = 40..44;
    pub const FIRST_LIST: Field = 44..48;
    pub const LIST_STRIDE: Field = 48..56;
    pub const RESERVED_2: Field = 56..60;
    pub const CRC: Field = 60..64;

    pub mod reference {
        use super::Field;
        pub const ADDR: Field = 0..8;
        pub const LEN: Field = 8..12;
        pub const KEY: Field = 12..16;
    }
}

use field::Field;

/// Reads a little-endian unsigned field of up to 8 bytes. The caller has checked the length.
#[inline]
fn get_le(b: &[u8], f: Field) -> u64 {
    b[f].iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

/// Writes the low bytes of `v` as a little-endian field of up to 8 bytes.
#[inline]
fn put_le(b: &mut [u8], f: Field, v: u64) {
    for (i, o) in b[f].iter_mut().enumerate() {
        *o = (v >> (8 * i)) as u8;
    }
}

/// A view of a [`MetaRecord`]'s 64 bytes: raw accessors over the `field` layout, no
/// validation beyond the length (that is [`MetaRecord::parse`]'s job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRecordPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MetaRecordPacket<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        MetaRecordPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds a whole record (`Truncated` otherwise); bytes after the
    /// first 64 are ignored.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < META_RECORD_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The magic (ASCII `DTAM` in a record).
    #[inline]
    pub fn magic(&self) -> [u8; 4] {
        let mut m = [0; 4];
        m.copy_from_slice(&self.b()[field::MAGIC]);
        m
    }

    /// Record version (1, or 2 with a redundancy N).
    #[inline]
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }

    /// The kind byte ([`kind`]).
    #[inline]
    pub fn kind(&self) -> u8 {
        self.b()[field::KIND]
    }

    /// The hash profile byte.
    #[inline]
    pub fn hash(&self) -> u8 {
        self.b()[field::HASH]
    }

    /// The flags byte ([`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }

    /// Virtual address of the region's first byte.
    #[inline]
    pub fn addr(&self) -> u64 {
        get_le(self.b(), field::ADDR)
    }

    /// Region length in bytes.
    #[inline]
    pub fn region_len(&self) -> u64 {
        get_le(self.b(), field::LEN)
    }

    /// R_Key of the region.
    #[inline]
    pub fn rkey(&self) -> u32 {
        get_le(self.b(), field::RKEY) as u32
    }

    /// Slot or entry size (Sketch-Merge: cell width).
    #[inline]
    pub fn slot_size(&self) -> u32 {
        get_le(self.b(), field::SLOT_SIZE) as u32
    }

    /// Slots, ring capacity or chunks (Sketch-Merge: columns).
    #[inline]
    pub fn count(&self) -> u32 {
        get_le(self.b(), field::COUNT) as u32
    }

    /// Entries (Sketch-Merge: columns) per RDMA WRITE.
    #[inline]
    pub fn batch(&self) -> u32 {
        get_le(self.b(), field::BATCH) as u32
    }

    /// Hop bound B (Sketch-Merge: rows).
    #[inline]
    pub fn hops(&self) -> u8 {
        self.b()[field::HOPS]
    }

    /// Byte 39: the redundancy N in version 2, reserved in version 1.
    #[inline]
    pub fn redundancy(&self) -> u8 {
        self.b()[field::REDUNDANCY]
    }

    /// Lists in an Append store (Sketch-Merge: sketch ID).
    #[inline]
    pub fn lists(&self) -> u32 {
        get_le(self.b(), field::LISTS) as u32
    }

    /// First list ID (Sketch-Merge: sketch kind code).
    #[inline]
    pub fn first_list(&self) -> u32 {
        get_le(self.b(), field::FIRST_LIST) as u32
    }

    /// Bytes between consecutive lists (Sketch-Merge: epoch slots).
    #[inline]
    pub fn list_stride(&self) -> u64 {
        get_le(self.b(), field::LIST_STRIDE)
    }

    /// The reserved bytes 56–59 as a number (0 in a valid record).
    #[inline]
    pub fn reserved(&self) -> u32 {
        get_le(self.b(), field::RESERVED_2) as u32
    }

    /// The CRC as stored.
    #[inline]
    pub fn crc(&self) -> u32 {
        get_le(self.b(), field::CRC) as u32
    }

    /// Whether the stored CRC is the IEEE CRC-32 of the bytes before it.
    #[inline]
    pub fn crc_is_valid(&self) -> bool {
        IEEE.checksum(&self.b()[..field::CRC.start]) == self.crc()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MetaRecordPacket<T> {
    #[inline]
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the magic.
    #[inline]
    pub fn set_magic(&mut self, v: [u8; 4]) {
        self.b_mut()[field::MAGIC].copy_from_slice(&v);
    }

    /// Sets the version.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.b_mut()[field::VERSION] = v;
    }

    /// Sets the kind byte.
    #[inline]
    pub fn set_kind(&mut self, v: u8) {
        self.b_mut()[field::KIND] = v;
    }

    /// Sets the hash profile byte.
    #[inline]
    pub fn set_hash(&mut self, v: u8) {
        self.b_mut()[field::HASH] = v;
    }

    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.b_mut()[field::FLAGS] = v;
    }

    /// Sets the region address.
    #[inline]
    pub fn set_addr(&mut self, v: u64) {
        put_le(self.b_mut(), field::ADDR, v);
    }

    /// Sets the region length.
    #[inline]
    pub fn set_region_len(&mut self, v: u64) {
        put_le(self.b_mut(), field::LEN, v);
    }

    /// Sets the R_Key.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        put_le(self.b_mut(), field::RKEY, v as u64);
    }

    /// Sets the slot or entry size.
    #[inline]
    pub fn set_slot_size(&mut self, v: u32) {
        put_le(self.b_mut(), field::SLOT_SIZE, v as u64);
    }

    /// Sets the count.
    #[inline]
    pub fn set_count(&mut self, v: u32) {
        put_le(self.b_mut(), field::COUNT, v as u64);
    }

    /// Sets the batch, saturated at `u16::MAX` (the field's width).
    #[inline]
    pub fn set_batch(&mut self, v: u32) {
        put_le(self.b_mut(), field::BATCH, v.min(u16::MAX as u32) as u64);
    }

    /// Sets the hop bound.
    #[inline]
    pub fn set_hops(&mut self, v: u8) {
        self.b_mut()[field::HOPS] = v;
    }

    /// Sets byte 39 (the redundancy N in version 2).
    #[inline]
    pub fn set_redundancy(&mut self, v: u8) {
        self.b_mut()[field::REDUNDANCY] = v;
    }

    /// Sets the list count.
    #[inline]
    pub fn set_lists(&mut self, v: u32) {
        put_le(self.b_mut(), field::LISTS, v as u64);
    }

    /// Sets the first list ID.
    #[inline]
    pub fn set_first_list(&mut self, v: u32) {
        put_le(self.b_mut(), field::FIRST_LIST, v as u64);
    }

    /// Sets the list stride.
    #[inline]
    pub fn set_list_stride(&mut self, v: u64) {
        put_le(self.b_mut(), field::LIST_STRIDE, v);
    }

    /// Writes the CRC of the bytes before it.
    #[inline]
    pub fn fill_crc(&mut self) {
        let crc = IEEE.checksum(&self.b_mut()[..field::CRC.start]);
        put_le(self.b_mut(), field::CRC, crc as u64);
    }
}

#[inline]
fn hash_code(h: HashProfile) -> u8 {
    match h {
        HashProfile::Reference => 0,
        HashProfile::Independent => 1,
    }
}

/// A Sketch store's hash profile in the hash byte: 1 independent (the code the byte always
/// had), 2 Tofino.
fn sketch_hash_code(h: crate::sketch::SketchHash) -> u8 {
    match h {
        crate::sketch::SketchHash::Independent => hash_code(HashProfile::Independent),
        crate::sketch::SketchHash::Tofino => 2,
    }
}

fn sketch_hash_from_code(c: u8) -> Result<crate::sketch::SketchHash> {
    match c {
        1 => Ok(crate::sketch::SketchHash::Independent),
        2 => Ok(crate::sketch::SketchHash::Tofino),
        _ => Err(Error::Malformed),
    }
}

#[inline]
fn hash_from_code(c: u8) -> Result<HashProfile> {
    match c {
        0 => Ok(HashProfile::Reference),
        1 => Ok(HashProfile::Independent),
        _ => Err(Error::Malformed),
    }
}

/// A store's description as the collector SENDs it after RTU (see the module docs for bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRecord {
    /// Virtual address of the region's first byte.
    pub addr: u64,
    /// Region length in bytes.
    pub len: u64,
    /// R_Key of the region.
    pub rkey: u32,
    /// Whether the collector verifies the ICRC.
    pub verify_icrc: bool,
    /// Sequenced Append only: list-head messages follow the record (flag bit 2).
    pub list_heads: bool,
    /// The store's N (version 2); always `None` for Append.
    pub redundancy: Option<Redundancy>,
    /// Primitive and layout.
    pub kind: StoreKind,
}

impl MetaRecord {
    /// The record describing `meta` (whose name and QP list are not part of the record).
    ///
    /// An Append batch above `u16::MAX` is saturated; layouts cap batches far below that, so
    /// such a value stays invalid on the other side rather than becoming a different valid one.
    /// An Append store's redundancy is dropped (the kind has none).
    pub fn from_store_meta(meta: &StoreMeta, verify_icrc: bool) -> MetaRecord {
        let kind = match meta.kind {
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride,
            } => StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch: batch.min(u16::MAX as u32),
                format,
                list_stride,
            },
            StoreKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch,
                epochs,
                hash,
            } => StoreKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch: batch.min(u16::MAX as u32),
                epochs,
                hash,
            },
            ref k => k.clone(),
        };
        MetaRecord {
            addr: meta.addr,
            len: meta.len,
            rkey: meta.rkey,
            verify_icrc,
            list_heads: false,
            redundancy: meta.redundancy.filter(|_| kind.has_redundancy()),
            kind,
        }
    }

    /// The store this record describes, under `name`, with no pre-arranged QPs (the QPN comes
    /// from the CM exchange).
    pub fn to_store_meta(&self, name: String) -> StoreMeta {
        StoreMeta {
            name,
            addr: self.addr,
            len: self.len,
            rkey: self.rkey,
            qps: Vec::new(),
            redundancy: self.redundancy,
            kind: self.kind.clone(),
        }
    }

    /// Parses and validates a record (see the module docs for the checks and their errors).
    pub fn parse(bytes: &[u8]) -> Result<MetaRecord> {
        let p = MetaRecordPacket::new_checked(bytes)?;
        if p.magic() != META_MAGIC {
            return Err(Error::Malformed);
        }
        let version = p.version();
        if version != META_VERSION && version != META_VERSION_1 {
            return Err(Error::UnsupportedVersion);
        }
        if !p.crc_is_valid() {
            return Err(Error::Malformed);
        }

        let flags = p.flags();
        let slot_size = p.slot_size();
        let count = p.count();
        let batch = p.batch();
        let hops = p.hops();
        let lists = p.lists();
        let first_list = p.first_list();
        let list_stride = p.list_stride();
        let reserved_zero = p.reserved() == 0;
        let append_fields_zero = batch == 0 && lists == 0 && first_list == 0 && list_stride == 0;

        // Flags a kind may carry besides VERIFY_ICRC.
        let (kind, kind_flags, unused_zero) = match p.kind() {
            kind::KEY_WRITE => (
                StoreKind::KeyWrite {
                    slots: count,
                    slot_size,
                    hash: hash_from_code(p.hash())?,
                },
                0,
                hops == 0 && append_fields_zero,
            ),
            kind::KEY_INCREMENT => (
                StoreKind::KeyIncrement {
                    slots: count,
                    hash: hash_from_code(p.hash())?,
                },
                0,
                slot_size == COUNTER_LEN && hops == 0 && append_fields_zero,
            ),
            kind::APPEND => (
                StoreKind::Append {
                    lists,
                    first_list,
                    capacity: count,
                    entry_size: slot_size,
                    batch,
                    format: if flags & flags::APPEND_SEQUENCED != 0 {
                        AppendFormat::Sequenced
                    } else {
                        AppendFormat::Reference
                    },
                    list_stride,
                },
                if flags & flags::APPEND_SEQUENCED != 0 {
                    flags::APPEND_SEQUENCED | flags::LIST_HEADS
                } else {
                    flags::APPEND_SEQUENCED
                },
                p.hash() == 0 && hops == 0,
            ),
            kind::POSTCARD => (
                StoreKind::Postcard {
                    chunks: count,
                    hops,
                    hash: hash_from_code(p.hash())?,
                },
                0,
                slot_size == 0 && append_fields_zero,
            ),
            kind::SKETCH => (
                StoreKind::Sketch {
                    sketch_id: u16::try_from(lists).map_err(|_| Error::Malformed)?,
                    sketch: u8::try_from(first_list)
                        .ok()
                        .and_then(crate::sketch::SketchKind::from_code)
                        .ok_or(Error::Malformed)?,
                    rows: hops,
                    columns: count,
                    cell_width: u8::try_from(slot_size).map_err(|_| Error::Malformed)?,
                    batch,
                    epochs: u32::try_from(list_stride).map_err(|_| Error::Malformed)?,
                    hash: sketch_hash_from_code(p.hash())?,
                },
                0,
                true,
            ),
            _ => return Err(Error::UnknownOpcode),
        };
        if flags & !(flags::VERIFY_ICRC | kind_flags) != 0 || !unused_zero || !reserved_zero {
            return Err(Error::Malformed);
        }
        let redundancy = match (version, p.redundancy()) {
            (META_VERSION_1, 0) => None,
            (META_VERSION, n) if kind.has_redundancy() => {
                Some(Redundancy::new(n).ok_or(Error::Malformed)?)
            }
            _ => return Err(Error::Malformed),
        };
        Ok(MetaRecord {
            addr: p.addr(),
            len: p.region_len(),
            rkey: p.rkey(),
            verify_icrc: flags & flags::VERIFY_ICRC != 0,
            list_heads: flags & flags::LIST_HEADS != 0,
            redundancy,
            kind,
        })
    }

    /// Bytes the record occupies.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        META_RECORD_LEN
    }

    /// Writes the record, CRC included: version 2 with N in byte 39 when the record carries
    /// one (never for Append, whose `redundancy` is ignored), version 1 otherwise. An Append
    /// batch above `u16::MAX` is saturated.
    pub fn emit(&self, out: &mut [u8; META_RECORD_LEN]) {
        out.fill(0);
        let mut p = MetaRecordPacket::new_unchecked(&mut out[..]);
        p.set_magic(META_MAGIC);
        match self.redundancy.filter(|_| self.kind.has_redundancy()) {
            Some(n) => {
                p.set_version(META_VERSION);
                p.set_redundancy(n.get());
            }
            None => p.set_version(META_VERSION_1),
        }
        let mut flags = if self.verify_icrc {
            flags::VERIFY_ICRC
        } else {
            0
        };
        p.set_addr(self.addr);
        p.set_region_len(self.len);
        p.set_rkey(self.rkey);
        match self.kind {
            StoreKind::KeyWrite {
                slots,
                slot_size,
                hash,
            } => {
                p.set_kind(kind::KEY_WRITE);
                p.set_hash(hash_code(hash));
                p.set_slot_size(slot_size);
                p.set_count(slots);
            }
            StoreKind::KeyIncrement { slots, hash } => {
                p.set_kind(kind::KEY_INCREMENT);
                p.set_hash(hash_code(hash));
                p.set_slot_size(COUNTER_LEN);
                p.set_count(slots);
            }
            StoreKind::Append {
                lists,
                first_list,
                capacity,
                entry_size,
                batch,
                format,
                list_stride,
            } => {
                p.set_kind(kind::APPEND);
                if format == AppendFormat::Sequenced {
                    flags |= flags::APPEND_SEQUENCED;
                    if self.list_heads {
                        flags |= flags::LIST_HEADS;
                    }
                }
                p.set_slot_size(entry_size);
                p.set_count(capacity);
                p.set_batch(batch);
                p.set_lists(lists);
                p.set_first_list(first_list);
                p.set_list_stride(list_stride);
            }
            StoreKind::Postcard { chunks, hops, hash } => {
                p.set_kind(kind::POSTCARD);
                p.set_hash(hash_code(hash));
                p.set_count(chunks);
                p.set_hops(hops);
            }
            StoreKind::Sketch {
                sketch_id,
                sketch,
                rows,
                columns,
                cell_width,
                batch,
                epochs,
                hash,
            } => {
                p.set_kind(kind::SKETCH);
                p.set_hash(sketch_hash_code(hash));
                p.set_slot_size(cell_width as u32);
                p.set_count(columns);
                p.set_batch(batch);
                p.set_hops(rows);
                p.set_lists(sketch_id as u32);
                p.set_first_list(sketch.code() as u32);
                p.set_list_stride(epochs as u64);
            }
        }
        p.set_flags(flags);
        p.fill_crc();
    }

    /// The record as bytes.
    pub fn to_bytes(&self) -> [u8; META_RECORD_LEN] {
        let mut out = [0u8; META_RECORD_LEN];
        self.emit(&mut out);
        out
    }
}

/// The reference collector's metadata SEND (dta-reference.md §5.5): 16 bytes, little-endian.
///
/// | Offset | Size | Field |
/// |---:|---:|---|
/// | 0 | 8 | region virtual address |
/// | 8 | 4 | region length in bytes |
/// | 12 | 4 | key: the reference sends the MR's **lkey** here (equal to the rkey on mlx5) |
///
/// It has no magic, version or checksum, so any 16 bytes parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReferenceMetaRecord {
    /// Virtual address of the region.
    pub addr: u64,
    /// Region length in bytes.
    pub len: u32,
    /// The MR key the reference collector sent (its lkey).
    pub key: u32,
}

impl ReferenceMetaRecord {
    /// Parses the first 16 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<ReferenceMetaRecord> {
        use field::reference as f;
        if bytes.len() < REFERENCE_META_LEN {
            return Err(Error::Truncated);
        }
        Ok(ReferenceMetaRecord {
            addr: get_le(bytes, f::ADDR),
            len: get_le(bytes, f::LEN) as u32,
            key: get_le(bytes, f::KEY) as u32,
        })
    }

    /// Bytes the record occupies.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        REFERENCE_META_LEN
    }

    /// Writes the record.
    pub fn emit(&self, out: &mut [u8; REFERENCE_META_LEN]) {
        use field::reference as f;
        put_le(out, f::ADDR, self.addr);
        put_le(out, f::LEN, self.len as u64);
        put_le(out, f::KEY, self.key as u64);
    }
}

#[cfg(test)]
mod tests;
