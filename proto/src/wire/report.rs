//! The unified report: what the translator consumes and the generator emits, whichever profile
//! carried it.
//!
//! [`parse_report`] turns one UDP payload (port 40040) into a [`Report`] whose keys and values
//! are *memory-ready*: the key is the exact byte string every hash of the store consumes, and
//! the value is in the byte order it takes in collector memory. For the reference profile that
//! means applying the reference translator's deliberate byte swaps (reference §2.7, §3.3–3.6):
//!
//! | Primitive | Wire field | In the [`Report`] |
//! |---|---|---|
//! | Key-Write, Key-Increment | `key` BE u32 | [`Key::from_u32_reference`]: the 4 wire bytes reversed |
//! | Key-Write | `data` BE u32 | the 4 wire bytes unchanged (the reference copies them) |
//! | Key-Increment | `counter` BE u64 | `delta`, the integer |
//! | Append | `data` BE u32 | the 4 wire bytes **reversed** (the reference byte-swaps) |
//! | Postcard | `key` BE u32 | the 4 wire bytes unchanged (hashed as received) |
//! | Postcard | `hopNum` 1..=255 | `hop = hopNum − 1`; 0 is [`Error::Malformed`] |
//!
//! Extended-profile keys and values are carried as sent. [`Report::emit`] applies the inverse
//! mapping, so `parse_report(emit(r)) == r` for every report valid in the profile emitted.
//!
//! Redundancy is passed through unchecked: the translator decides what 0 or too many copies
//! mean, and counts it.

use crate::consts::opcode;
use crate::types::{Key, Value, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::wire::dta::{field as rf, flags as rflags};
use crate::wire::dta::{
    AppendRepr, BaseVariant, DtaHeaderRepr, DtaPrimitiveRepr, DtaRepr, KeyIncrementRepr,
    KeyWriteRepr, Opcode, PostcarderRepr,
};
use crate::wire::dta_ext::{field as xf, flags as xflags, HEADER_LEN as EXT_HEADER_LEN};
use crate::wire::dta_ext::{
    is_extended, ExtAppendRepr, ExtHeaderRepr, ExtKeyIncrementRepr, ExtKeyWriteRepr,
    ExtPostcardRepr, ExtPrimitiveRepr, ExtReportRepr, MAX_PATH_LEN, MAX_REPORT_LEN,
};
use crate::wire::{Error, Result};

/// Longest UDP payload [`Report::emit`] can produce in any profile.
pub const MAX_EMIT_LEN: usize = MAX_REPORT_LEN;

/// The wire profile a datagram was parsed as (or is to be emitted as).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Reference profile, base variant A (2-byte base header, no seqnum).
    ReferenceA,
    /// Reference profile, base variant B (3-byte base header, 8-bit seqnum).
    ReferenceB,
    /// Our extended profile (see `PROTOCOL.md`).
    Extended,
}

impl Profile {
    /// The reference profile with the given base variant.
    #[inline]
    pub const fn reference(variant: BaseVariant) -> Profile {
        match variant {
            BaseVariant::A => Profile::ReferenceA,
            BaseVariant::B => Profile::ReferenceB,
        }
    }

    /// The reference base variant, or `None` for the extended profile.
    #[inline]
    pub const fn base_variant(self) -> Option<BaseVariant> {
        match self {
            Profile::ReferenceA => Some(BaseVariant::A),
            Profile::ReferenceB => Some(BaseVariant::B),
            Profile::Extended => None,
        }
    }
}

/// Which report format a component speaks: the configuration-facing twin of [`Profile`].
///
/// Written as `"reference-a"`, `"reference-b"` or `"extended"` in configuration files and on
/// the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportFormat {
    /// The reference profile with the given base variant.
    Reference(BaseVariant),
    /// Our extended profile.
    Extended,
}

impl ReportFormat {
    /// The configuration name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Reference(BaseVariant::A) => "reference-a",
            ReportFormat::Reference(BaseVariant::B) => "reference-b",
            ReportFormat::Extended => "extended",
        }
    }
}

impl From<ReportFormat> for Profile {
    #[inline]
    fn from(f: ReportFormat) -> Profile {
        match f {
            ReportFormat::Reference(v) => Profile::reference(v),
            ReportFormat::Extended => Profile::Extended,
        }
    }
}

impl From<Profile> for ReportFormat {
    #[inline]
    fn from(p: Profile) -> ReportFormat {
        match p.base_variant() {
            Some(v) => ReportFormat::Reference(v),
            None => ReportFormat::Extended,
        }
    }
}

/// A report-format name that is none of `reference-a`, `reference-b`, `extended`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownReportFormat;

impl core::fmt::Display for UnknownReportFormat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("unknown report format (expected reference-a, reference-b or extended)")
    }
}

impl std::error::Error for UnknownReportFormat {}

impl core::str::FromStr for ReportFormat {
    type Err = UnknownReportFormat;
    fn from_str(s: &str) -> core::result::Result<Self, Self::Err> {
        match s {
            "reference-a" => Ok(ReportFormat::Reference(BaseVariant::A)),
            "reference-b" => Ok(ReportFormat::Reference(BaseVariant::B)),
            "extended" => Ok(ReportFormat::Extended),
            _ => Err(UnknownReportFormat),
        }
    }
}

impl core::fmt::Display for ReportFormat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ReportFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> core::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ReportFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> core::result::Result<Self, D::Error> {
        struct Names;
        impl serde::de::Visitor<'_> for Names {
            type Value = ReportFormat;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str("\"reference-a\", \"reference-b\" or \"extended\"")
            }
            fn visit_str<E: serde::de::Error>(
                self,
                v: &str,
            ) -> core::result::Result<Self::Value, E> {
                v.parse()
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(Names)
    }
}

/// A report's importance (DTA drafts: low, medium, high). Under overload the translator sheds
/// low first.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Priority {
    /// May be dropped first.
    Low = 0,
    /// The default.
    #[default]
    Medium = 1,
    /// Dropped last.
    High = 2,
}

impl Priority {
    /// The priority for the two wire bits; `None` for 3.
    #[inline]
    pub const fn from_bits(bits: u8) -> Option<Priority> {
        match bits {
            0 => Some(Priority::Low),
            1 => Some(Priority::Medium),
            2 => Some(Priority::High),
            _ => None,
        }
    }
}

/// How [`parse_report`] reads UDP payloads arriving on port 40040.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParseConfig {
    /// Base variant assumed for reference-profile reports (nothing on the wire says which).
    pub reference_variant: BaseVariant,
    /// Accept reference-profile reports.
    pub accept_reference: bool,
    /// Accept extended-profile reports.
    pub accept_extended: bool,
    /// Priority given to reference reports, which carry none.
    pub reference_priority: Priority,
}

impl Default for ParseConfig {
    /// Variant B (the reference Manager's build and every generator script), both profiles
    /// accepted, reference reports at medium priority.
    fn default() -> Self {
        ParseConfig {
            reference_variant: BaseVariant::B,
            accept_reference: true,
            accept_extended: true,
            reference_priority: Priority::Medium,
        }
    }
}

/// The profile-independent part of a report's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReportHeader {
    /// What the datagram was parsed as. Ignored by [`Report::emit`], which is told the profile.
    pub profile: Profile,
    /// Tell the collector's CPU that this report landed.
    pub immediate: bool,
    /// The reporter retransmits this report on a NACK: track `seq`.
    pub retransmittable: bool,
    /// Per-reporter sequence number: the 8-bit seqnum of reference variant B, the 32-bit seq of
    /// the extended profile, `None` for reference variant A.
    pub seq: Option<u32>,
    /// Importance; for reference reports, [`ParseConfig::reference_priority`].
    pub priority: Priority,
}

/// A DTA primitive with memory-ready keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// Write `value` under `key`, `redundancy` times.
    KeyWrite {
        /// Requested copies, N (unchecked).
        redundancy: u8,
        /// The bytes every hash of the key-value store consumes.
        key: Key,
        /// The value in memory byte order.
        value: Value,
    },
    /// Add `delta` to `redundancy` counters of `key`.
    KeyIncrement {
        /// Requested counters, N (unchecked).
        redundancy: u8,
        /// The bytes every hash of the counter store consumes.
        key: Key,
        /// The increment.
        delta: u64,
    },
    /// Append `value` to list `list`.
    Append {
        /// The list ID.
        list: u32,
        /// The entry in memory byte order.
        value: Value,
    },
    /// One hop's postcard for a flow.
    Postcard {
        /// The bytes every hash of the postcard store consumes.
        flow: Key,
        /// 0-based hop index.
        hop: u8,
        /// Path length in hops, 0 if unknown.
        path_len: u8,
        /// The hop's value (before the per-hop encoding the translator applies).
        value: u32,
    },
}

impl Primitive {
    /// The opcode this primitive travels under.
    #[inline]
    pub const fn opcode(&self) -> Opcode {
        match self {
            Primitive::KeyWrite { .. } => Opcode::KeyWrite,
            Primitive::KeyIncrement { .. } => Opcode::KeyIncrement,
            Primitive::Append { .. } => Opcode::Append,
            Primitive::Postcard { .. } => Opcode::Postcard,
        }
    }
}

/// One parsed report. Plain data: `Copy`, no borrows of the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Report {
    /// The header fields.
    pub header: ReportHeader,
    /// The primitive and its operands.
    pub primitive: Primitive,
}

/// Parse one UDP payload received on the DTA port.
///
/// A first byte in 0xD0..=0xDF selects the extended profile (or [`Error::UnsupportedVersion`]
/// if `cfg.accept_extended` is false); anything else is read as the reference profile with
/// `cfg.reference_variant` (or [`Error::UnsupportedVersion`] if `cfg.accept_reference` is
/// false). An empty payload is [`Error::Truncated`].
#[inline]
pub fn parse_report(udp_payload: &[u8], cfg: &ParseConfig) -> Result<Report> {
    let mut r = Report::PLACEHOLDER;
    parse_report_into(udp_payload, cfg, &mut r)?;
    Ok(r)
}

/// [`parse_report`] into a caller-owned report (a burst loop reuses one), so the hot path
/// writes the fields in place instead of moving a returned report. On error `out` holds
/// unspecified (but valid) contents.
#[inline]
pub fn parse_report_into(udp_payload: &[u8], cfg: &ParseConfig, out: &mut Report) -> Result<()> {
    parse_fast(udp_payload, cfg, out, |b, c, out| {
        *out = parse_checked(b, c)?;
        Ok(())
    })
}

impl Report {
    /// A report to overwrite (see [`parse_report_into`]).
    pub const PLACEHOLDER: Report = Report {
        header: ReportHeader {
            profile: Profile::Extended,
            immediate: false,
            retransmittable: false,
            seq: None,
            priority: Priority::Medium,
        },
        primitive: Primitive::Append {
            list: 0,
            value: Value::EMPTY,
        },
    };
}

#[inline(always)]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The `len`-byte key that ends at `b[end]`: from the 16 bytes ending there when the datagram
/// has them (one wide load, see [`Key::from_window`]), else copied.
#[inline(always)]
fn key_ending_at(b: &[u8], end: usize, len: usize) -> Option<Key> {
    match end.checked_sub(MAX_KEY_LEN).and_then(|s| b.get(s..end)) {
        Some(w) => Key::from_window(w.try_into().ok()?, len),
        None => Key::new(b.get(end.checked_sub(len)?..end)?),
    }
}

/// The extended profile's base header as the fast path reads it (the version this build
/// speaks, no reserved bits, a known priority, and at least the shortest sub-header behind
/// it); `None` leaves the datagram to the full parser.
#[inline(always)]
fn fast_ext_header(b: &[u8], cfg: &ParseConfig) -> Option<ReportHeader> {
    if !cfg.accept_extended
        || b.first() != Some(&crate::wire::dta_ext::MAGIC_VERSION)
        || b.len() < EXT_HEADER_LEN + xf::KW_FIXED
        || b[xf::RESERVED] != 0
    {
        return None;
    }
    let flags = b[xf::FLAGS];
    if flags & xflags::RESERVED_MASK != 0 {
        return None;
    }
    let priority = match (flags & xflags::PRIORITY_MASK) >> xflags::PRIORITY_SHIFT {
        0 => Priority::Low,
        1 => Priority::Medium,
        2 => Priority::High,
        _ => return None,
    };
    Some(ReportHeader {
        profile: Profile::Extended,
        immediate: flags & xflags::IMMEDIATE != 0,
        retransmittable: flags & xflags::RETRANSMITTABLE != 0,
        seq: Some(be32(&b[xf::SEQ])),
        priority,
    })
}

/// The reference profile's base header in `cfg`'s variant, and its length; `None` if the
/// profile is not accepted or the datagram ends inside the header.
#[inline(always)]
fn fast_ref_header(b: &[u8], cfg: &ParseConfig) -> Option<(ReportHeader, usize)> {
    if !cfg.accept_reference {
        return None;
    }
    // The base header ends with its flags byte.
    let (hl, seq, flags) = match cfg.reference_variant {
        BaseVariant::A => (rf::A_FLAGS + 1, None, *b.get(rf::A_FLAGS)?),
        BaseVariant::B => (
            rf::B_FLAGS + 1,
            Some(u32::from(*b.get(rf::B_SEQNUM)?)),
            *b.get(rf::B_FLAGS)?,
        ),
    };
    let header = ReportHeader {
        profile: Profile::reference(cfg.reference_variant),
        immediate: flags & rflags::IMMEDIATE != 0,
        retransmittable: cfg.reference_variant == BaseVariant::B
            && flags & rflags::RETRANSMITABLE != 0,
        seq,
        priority: cfg.reference_priority,
    };
    Some((header, hl))
}

/// An extended Append sub-header and value (`body`: the datagram after the base header).
#[inline(always)]
fn fast_ext_append(body: &[u8]) -> Option<(u32, Value)> {
    let vl = *body.get(xf::AP_VALUE_LEN)? as usize;
    if body.len() != xf::AP_FIXED + vl
        || vl == 0
        || vl > MAX_VALUE_LEN
        || body[xf::AP_RESERVED] != [0, 0, 0]
    {
        return None;
    }
    Some((
        be32(&body[xf::AP_LIST_ID.start..]),
        Value::new(&body[xf::AP_FIXED..])?,
    ))
}

/// A reference Append body of exactly [`rf::APPEND_LEN`] bytes. The reference byte-swaps an
/// Append's data (see the module docs).
#[inline(always)]
fn fast_ref_append(body: &[u8]) -> (u32, Value) {
    (
        be32(&body[rf::APPEND_LIST_ID.start..]),
        value4(be32(&body[rf::APPEND_DATA.start..]).to_le_bytes()),
    )
}

/// An extended Postcarding report (`b`: the whole datagram): flow, hop, path length, value.
#[inline(always)]
fn fast_ext_postcard(b: &[u8]) -> Option<(Key, u8, u8, u32)> {
    let body = b.get(EXT_HEADER_LEN..)?;
    let (hop, path_len, kl) = (
        *body.get(xf::PC_HOP)?,
        *body.get(xf::PC_PATH_LEN)?,
        *body.get(xf::PC_KEY_LEN)? as usize,
    );
    if body.len() != xf::PC_FIXED + kl
        || kl == 0
        || kl > MAX_KEY_LEN
        || body[xf::PC_RESERVED] != 0
        || path_len > MAX_PATH_LEN
        || (path_len != 0 && hop >= path_len)
    {
        return None;
    }
    let flow = key_ending_at(b, b.len(), kl)?;
    Some((flow, hop, path_len, be32(&body[xf::PC_VALUE])))
}

/// A reference Postcarding body of exactly [`rf::PC_LEN`] bytes (hop numbers count from 1 on
/// the wire; 0 is left to the full parser).
#[inline(always)]
fn fast_ref_postcard(body: &[u8]) -> Option<(Key, u8, u8, u32)> {
    let hop = body[rf::PC_HOP_NUM].checked_sub(1)?;
    let flow = key4(body[rf::PC_KEY].try_into().ok()?);
    Some((flow, hop, 0, be32(&body[rf::PC_DATA])))
}

/// An extended Key-Write report (`b`: the whole datagram): redundancy, key, value.
#[inline(always)]
fn fast_ext_keywrite(b: &[u8]) -> Option<(u8, Key, Value)> {
    let body = b.get(EXT_HEADER_LEN..)?;
    let (n, kl, vl) = (
        *body.get(xf::KW_REDUNDANCY)?,
        *body.get(xf::KW_KEY_LEN)? as usize,
        *body.get(xf::KW_VALUE_LEN)? as usize,
    );
    if body.get(xf::KW_RESERVED) != Some(&0)
        || kl == 0
        || kl > MAX_KEY_LEN
        || vl == 0
        || vl > MAX_VALUE_LEN
        || body.len() != xf::KW_FIXED + kl + vl
    {
        return None;
    }
    Some((
        n,
        key_ending_at(b, EXT_HEADER_LEN + xf::KW_FIXED + kl, kl)?,
        Value::new(&body[xf::KW_FIXED + kl..])?,
    ))
}

/// An extended Key-Increment report (`b`: the whole datagram): redundancy, key, delta.
#[inline(always)]
fn fast_ext_keyincrement(b: &[u8]) -> Option<(u8, Key, u64)> {
    let body = b.get(EXT_HEADER_LEN..)?;
    let kl = *body.get(xf::KI_KEY_LEN)? as usize;
    if body.len() != xf::KI_FIXED + kl
        || kl == 0
        || kl > MAX_KEY_LEN
        || body[xf::KI_RESERVED] != [0, 0]
    {
        return None;
    }
    let delta = u64::from_be_bytes(body[xf::KI_DELTA].try_into().ok()?);
    Some((
        body[xf::KI_REDUNDANCY],
        key_ending_at(b, b.len(), kl)?,
        delta,
    ))
}

/// A reference Key-Write body of exactly [`rf::KW_LEN`] bytes: redundancy, key, value.
#[inline(always)]
fn fast_ref_keywrite(body: &[u8]) -> (u8, Key, Value) {
    let kw = rf::KW_DATA.start;
    (
        body[rf::KV_REDUNDANCY],
        Key::from_u32_reference(be32(&body[rf::KV_KEY])),
        value4([body[kw], body[kw + 1], body[kw + 2], body[kw + 3]]),
    )
}

/// A reference Key-Increment body of exactly [`rf::KI_LEN`] bytes: redundancy, key, delta.
#[inline(always)]
fn fast_ref_keyincrement(body: &[u8]) -> Option<(u8, Key, u64)> {
    Some((
        body[rf::KV_REDUNDANCY],
        Key::from_u32_reference(be32(&body[rf::KV_KEY])),
        u64::from_be_bytes(body[rf::KI_COUNTER].try_into().ok()?),
    ))
}

/// A Key-Write or Key-Increment of the primitive `out` already holds, read into `out` in place:
/// its header and fields overwritten, exactly as [`parse_report_into`] would set them, with no
/// report built and moved. False for every other datagram (a report of another primitive, or
/// one the fast path does not take, errors among them), with `out` unspecified: the caller
/// hands those to [`parse_report_into`]. The translator's lane for a run of keyed reports
/// (property-tested against the full parser).
#[inline(always)]
pub fn parse_keyed_into(b: &[u8], cfg: &ParseConfig, out: &mut Report) -> bool {
    keyed_into(b, cfg, out).is_some()
}

/// [`parse_keyed_into`], `None` for a datagram it does not take.
#[inline(always)]
fn keyed_into(b: &[u8], cfg: &ParseConfig, out: &mut Report) -> Option<()> {
    let first = *b.first()?;
    let header = if is_extended(first) {
        let header = fast_ext_header(b, cfg)?;
        match (&mut out.primitive, b[xf::OPCODE]) {
            (
                Primitive::KeyWrite {
                    redundancy,
                    key,
                    value,
                },
                opcode::KEY_WRITE,
            ) => (*redundancy, *key, *value) = fast_ext_keywrite(b)?,
            (
                Primitive::KeyIncrement {
                    redundancy,
                    key,
                    delta,
                },
                opcode::KEY_INCREMENT,
            ) => (*redundancy, *key, *delta) = fast_ext_keyincrement(b)?,
            _ => return None,
        }
        header
    } else {
        let (header, hl) = fast_ref_header(b, cfg)?;
        let body = &b[hl..];
        match (&mut out.primitive, first, body.len()) {
            (
                Primitive::KeyWrite {
                    redundancy,
                    key,
                    value,
                },
                opcode::KEY_WRITE,
                rf::KW_LEN,
            ) => (*redundancy, *key, *value) = fast_ref_keywrite(body),
            (
                Primitive::KeyIncrement {
                    redundancy,
                    key,
                    delta,
                },
                opcode::KEY_INCREMENT,
                rf::KI_LEN,
            ) => (*redundancy, *key, *delta) = fast_ref_keyincrement(body)?,
            _ => return None,
        }
        header
    };
    out.header = header;
    Some(())
}

/// An Append report read without building a [`Report`]: its header, list and value, exactly
/// as [`parse_report_into`] gives them. `None` for every other datagram, an Append the fast
/// path does not take included (errors among them): the caller hands those to
/// [`parse_report_into`]. The translator's lane for event logs, whose entries are the most
/// frequent reports there are (property-tested against the full parser).
#[inline(always)]
pub fn parse_append_fast(b: &[u8], cfg: &ParseConfig) -> Option<(ReportHeader, u32, Value)> {
    let first = *b.first()?;
    if is_extended(first) {
        if b.get(xf::OPCODE) != Some(&opcode::APPEND) {
            return None;
        }
        let header = fast_ext_header(b, cfg)?;
        let (list, value) = fast_ext_append(&b[EXT_HEADER_LEN..])?;
        Some((header, list, value))
    } else if first == opcode::APPEND {
        let (header, hl) = fast_ref_header(b, cfg)?;
        let body = &b[hl..];
        if body.len() != rf::APPEND_LEN {
            return None;
        }
        let (list, value) = fast_ref_append(body);
        Some((header, list, value))
    } else {
        None
    }
}

/// A postcard's fields as [`parse_postcard_fast`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostcardFields {
    /// The flow.
    pub flow: Key,
    /// Its hop (0-based).
    pub hop: u8,
    /// The path's length (0: unknown).
    pub path_len: u8,
    /// The hop's value.
    pub value: u32,
}

impl PostcardFields {
    /// The report's primitive.
    pub fn primitive(&self) -> Primitive {
        Primitive::Postcard {
            flow: self.flow,
            hop: self.hop,
            path_len: self.path_len,
            value: self.value,
        }
    }
}

/// [`parse_append_fast`] for Postcarding reports: header and fields, `None` for anything else.
#[inline(always)]
pub fn parse_postcard_fast(b: &[u8], cfg: &ParseConfig) -> Option<(ReportHeader, PostcardFields)> {
    let first = *b.first()?;
    let (header, (flow, hop, path_len, value)) = if is_extended(first) {
        if b.get(xf::OPCODE) != Some(&opcode::POSTCARD) {
            return None;
        }
        (fast_ext_header(b, cfg)?, fast_ext_postcard(b)?)
    } else if first == opcode::POSTCARD {
        let (header, hl) = fast_ref_header(b, cfg)?;
        let body = &b[hl..];
        if body.len() != rf::PC_LEN {
            return None;
        }
        (header, fast_ref_postcard(body)?)
    } else {
        return None;
    };
    Some((
        header,
        PostcardFields {
            flow,
            hop,
            path_len,
            value,
        },
    ))
}

/// The common case in a few dozen instructions: a well-formed report of an accepted profile,
/// read straight into a [`Report`]. Anything unusual (errors included) is handed to `slow`
/// ([`parse_checked`], the full view/Repr machinery); the two agree on every input the fast
/// path accepts (property-tested). Returning `Result` directly, rather than an `Option` the
/// caller converts, keeps the report from being moved between enum layouts.
#[inline]
fn parse_fast(
    b: &[u8],
    cfg: &ParseConfig,
    out: &mut Report,
    slow: impl FnOnce(&[u8], &ParseConfig, &mut Report) -> Result<()>,
) -> Result<()> {
    macro_rules! slow {
        () => {
            return slow(b, cfg, out)
        };
    }
    macro_rules! some {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => slow!(),
            }
        };
    }
    let first = *some!(b.first());
    if is_extended(first) {
        let header = some!(fast_ext_header(b, cfg));
        let body = &b[EXT_HEADER_LEN..];
        let primitive = match b[xf::OPCODE] {
            opcode::KEY_WRITE => {
                let (redundancy, key, value) = some!(fast_ext_keywrite(b));
                Primitive::KeyWrite {
                    redundancy,
                    key,
                    value,
                }
            }
            opcode::APPEND => {
                let (list, value) = some!(fast_ext_append(body));
                Primitive::Append { list, value }
            }
            opcode::KEY_INCREMENT => {
                let (redundancy, key, delta) = some!(fast_ext_keyincrement(b));
                Primitive::KeyIncrement {
                    redundancy,
                    key,
                    delta,
                }
            }
            opcode::POSTCARD => {
                let (flow, hop, path_len, value) = some!(fast_ext_postcard(b));
                Primitive::Postcard {
                    flow,
                    hop,
                    path_len,
                    value,
                }
            }
            _ => slow!(),
        };
        out.header = header;
        out.primitive = primitive;
        return Ok(());
    }
    let (header, hl) = some!(fast_ref_header(b, cfg));
    let body = &b[hl..];
    let primitive = match (first, body.len()) {
        (opcode::KEY_WRITE, rf::KW_LEN) => {
            let (redundancy, key, value) = fast_ref_keywrite(body);
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            }
        }
        // The reference byte-swaps an Append's data (see the module docs).
        (opcode::APPEND, rf::APPEND_LEN) => {
            let (list, value) = fast_ref_append(body);
            Primitive::Append { list, value }
        }
        (opcode::KEY_INCREMENT, rf::KI_LEN) => {
            let (redundancy, key, delta) = some!(fast_ref_keyincrement(body));
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            }
        }
        (opcode::POSTCARD, rf::PC_LEN) => {
            let (flow, hop, path_len, value) = some!(fast_ref_postcard(body));
            Primitive::Postcard {
                flow,
                hop,
                path_len,
                value,
            }
        }
        _ => slow!(),
    };
    out.header = header;
    out.primitive = primitive;
    Ok(())
}

/// The full parser: every check, every error.
#[cold]
#[inline(never)]
fn parse_checked(udp_payload: &[u8], cfg: &ParseConfig) -> Result<Report> {
    let first = *udp_payload.first().ok_or(Error::Truncated)?;
    if is_extended(first) {
        if !cfg.accept_extended {
            return Err(Error::UnsupportedVersion);
        }
        Ok(from_extended(&ExtReportRepr::parse(udp_payload)?))
    } else {
        if !cfg.accept_reference {
            return Err(Error::UnsupportedVersion);
        }
        let repr = DtaRepr::parse(udp_payload, cfg.reference_variant)?;
        from_reference(&repr, cfg.reference_priority)
    }
}

fn from_reference(r: &DtaRepr, priority: Priority) -> Result<Report> {
    let h = &r.header;
    let header = ReportHeader {
        profile: Profile::reference(h.variant),
        immediate: h.immediate,
        retransmittable: h.retransmitable,
        seq: match h.variant {
            BaseVariant::A => None,
            BaseVariant::B => Some(u32::from(h.seqnum)),
        },
        priority,
    };
    let primitive = match r.primitive {
        DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
            redundancy,
            key,
            data,
        }) => Primitive::KeyWrite {
            redundancy,
            key: Key::from_u32_reference(key),
            value: value4(data.to_be_bytes()),
        },
        DtaPrimitiveRepr::KeyIncrement(KeyIncrementRepr {
            redundancy,
            key,
            counter,
        }) => Primitive::KeyIncrement {
            redundancy,
            key: Key::from_u32_reference(key),
            delta: counter,
        },
        DtaPrimitiveRepr::Append(AppendRepr { list_id, data }) => Primitive::Append {
            list: list_id,
            value: value4(data.to_le_bytes()),
        },
        DtaPrimitiveRepr::Postcarder(PostcarderRepr { key, hop_num, data }) => {
            let hop = hop_num.checked_sub(1).ok_or(Error::Malformed)?;
            Primitive::Postcard {
                flow: key4(key.to_be_bytes()),
                hop,
                path_len: 0,
                value: data,
            }
        }
    };
    Ok(Report { header, primitive })
}

fn from_extended(r: &ExtReportRepr) -> Report {
    let h = &r.header;
    let header = ReportHeader {
        profile: Profile::Extended,
        immediate: h.immediate,
        retransmittable: h.retransmittable,
        seq: Some(h.seq),
        priority: h.priority,
    };
    let primitive = match r.primitive {
        ExtPrimitiveRepr::KeyWrite(ExtKeyWriteRepr {
            redundancy,
            key,
            value,
        }) => Primitive::KeyWrite {
            redundancy,
            key,
            value,
        },
        ExtPrimitiveRepr::KeyIncrement(ExtKeyIncrementRepr {
            redundancy,
            key,
            delta,
        }) => Primitive::KeyIncrement {
            redundancy,
            key,
            delta,
        },
        ExtPrimitiveRepr::Append(ExtAppendRepr { list_id, value }) => Primitive::Append {
            list: list_id,
            value,
        },
        ExtPrimitiveRepr::Postcard(ExtPostcardRepr {
            hop,
            path_len,
            key,
            value,
        }) => Primitive::Postcard {
            flow: key,
            hop,
            path_len,
            value,
        },
    };
    Report { header, primitive }
}

#[inline]
fn key4(b: [u8; 4]) -> Key {
    Key::from_array4(b)
}

#[inline]
fn value4(b: [u8; 4]) -> Value {
    Value::from_array4(b)
}

#[inline]
fn bytes4(b: &[u8]) -> Result<[u8; 4]> {
    match *b {
        [b0, b1, b2, b3] => Ok([b0, b1, b2, b3]),
        _ => Err(Error::Malformed),
    }
}

impl Report {
    /// The reference-profile wire form; [`Error::Malformed`] unless keys and values are 4 bytes
    /// and a postcard's hop is at most 254.
    ///
    /// What the reference cannot carry is dropped: the priority, the path length and, in
    /// variant A, the seq and the retransmittable flag. A variant-B seqnum is the low 8 bits of
    /// `seq` (reference seqnums wrap mod 256); `None` is sent as 0.
    pub fn reference_repr(&self, variant: BaseVariant) -> Result<DtaRepr> {
        let primitive = match self.primitive {
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            } => DtaPrimitiveRepr::KeyWrite(KeyWriteRepr {
                redundancy,
                key: u32::from_le_bytes(bytes4(key.as_bytes())?),
                data: u32::from_be_bytes(bytes4(value.as_bytes())?),
            }),
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            } => DtaPrimitiveRepr::KeyIncrement(KeyIncrementRepr {
                redundancy,
                key: u32::from_le_bytes(bytes4(key.as_bytes())?),
                counter: delta,
            }),
            Primitive::Append { list, value } => DtaPrimitiveRepr::Append(AppendRepr {
                list_id: list,
                data: u32::from_le_bytes(bytes4(value.as_bytes())?),
            }),
            Primitive::Postcard {
                flow,
                hop,
                path_len: _,
                value,
            } => DtaPrimitiveRepr::Postcarder(PostcarderRepr {
                key: u32::from_be_bytes(bytes4(flow.as_bytes())?),
                hop_num: hop.checked_add(1).ok_or(Error::Malformed)?,
                data: value,
            }),
        };
        let b = variant == BaseVariant::B;
        let header = DtaHeaderRepr {
            variant,
            opcode: primitive.opcode(),
            seqnum: if b {
                self.header.seq.unwrap_or(0) as u8
            } else {
                0
            },
            immediate: self.header.immediate,
            retransmitable: b && self.header.retransmittable,
            reserved_flags: 0,
        };
        Ok(DtaRepr { header, primitive })
    }

    /// The extended-profile wire form; [`Error::Malformed`] for an empty value, a path length
    /// above 16 or a hop not below a known path length. A `seq` of `None` is sent as 0.
    pub fn extended_repr(&self) -> Result<ExtReportRepr> {
        let primitive = match self.primitive {
            Primitive::KeyWrite {
                redundancy,
                key,
                value,
            } => ExtPrimitiveRepr::KeyWrite(ExtKeyWriteRepr {
                redundancy,
                key,
                value,
            }),
            Primitive::KeyIncrement {
                redundancy,
                key,
                delta,
            } => ExtPrimitiveRepr::KeyIncrement(ExtKeyIncrementRepr {
                redundancy,
                key,
                delta,
            }),
            Primitive::Append { list, value } => ExtPrimitiveRepr::Append(ExtAppendRepr {
                list_id: list,
                value,
            }),
            Primitive::Postcard {
                flow,
                hop,
                path_len,
                value,
            } => ExtPrimitiveRepr::Postcard(ExtPostcardRepr {
                hop,
                path_len,
                key: flow,
                value,
            }),
        };
        primitive.check()?;
        let header = ExtHeaderRepr {
            opcode: primitive.opcode(),
            immediate: self.header.immediate,
            retransmittable: self.header.retransmittable,
            priority: self.header.priority,
            seq: self.header.seq.unwrap_or(0),
        };
        Ok(ExtReportRepr { header, primitive })
    }

    /// Length of this report on the wire in `profile`, or [`Error::Malformed`] if the profile
    /// cannot carry it (see [`Report::emit`]).
    pub fn buffer_len(&self, profile: Profile) -> Result<usize> {
        match profile.base_variant() {
            Some(v) => self.reference_repr(v).map(|r| r.buffer_len()),
            None => self.extended_repr().map(|r| r.buffer_len()),
        }
    }

    /// Write this report as a UDP payload in `profile`; returns its length.
    ///
    /// [`Error::Malformed`] if the profile cannot carry it: the reference profile needs 4-byte
    /// keys and values and a hop of at most 254 (it drops priority, path length and, in variant
    /// A, seq and retransmittable; a variant-B seqnum is `seq mod 256`); the extended profile
    /// needs a non-empty value, a path length of at most 16 and a hop below a known path
    /// length. [`Error::Truncated`] if `out` is shorter than [`Report::buffer_len`]
    /// ([`MAX_EMIT_LEN`] always suffices). `header.profile` is ignored.
    pub fn emit(&self, profile: Profile, out: &mut [u8]) -> Result<usize> {
        match profile.base_variant() {
            Some(v) => {
                let r = self.reference_repr(v)?;
                if out.len() < r.buffer_len() {
                    return Err(Error::Truncated);
                }
                Ok(r.emit(out))
            }
            None => {
                let r = self.extended_repr()?;
                if out.len() < r.buffer_len() {
                    return Err(Error::Truncated);
                }
                Ok(r.emit(out))
            }
        }
    }
}

#[cfg(test)]
mod tests;
