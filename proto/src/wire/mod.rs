//! Packet views and representations, in the smoltcp style.
//!
//! Every header has two levels:
//! - a *view* `Foo<T: AsRef<[u8]>>` over a byte buffer, with field offsets as `const` ranges in
//!   a private `field` module and `#[inline]` accessors that never allocate. `Foo::new_checked`
//!   validates the length; after it succeeds no accessor panics. Untrusted bytes always go
//!   through `new_checked`.
//! - a *representation* `FooRepr`, a plain validated struct with `parse(&view)` and
//!   `emit(&mut view)`. `emit` never panics on a buffer of `buffer_len()` bytes.
//!
//! Parse errors are a small `Copy` enum, [`Error`]; human-facing errors live at the edges.

pub mod cm;
pub mod dta;
pub mod dta_ext;
pub mod ethernet;
pub mod ib;
pub mod ipv4;
pub mod listheads;
pub mod mad;
pub mod metarec;
pub mod nack;
pub mod report;
pub mod roce;
pub mod sketch;
pub mod telemetry_report;
pub mod udp;
pub(crate) mod view;

/// Why bytes were rejected. Cheap to return and to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or the length a header field claims).
    Truncated,
    /// A field holds a value the format forbids (bad version, reserved bits set, bad length).
    Malformed,
    /// An opcode or type this implementation does not know.
    UnknownOpcode,
    /// A known but unsupported protocol version.
    UnsupportedVersion,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated",
            Error::Malformed => "malformed",
            Error::UnknownOpcode => "unknown opcode",
            Error::UnsupportedVersion => "unsupported version",
        })
    }
}

impl std::error::Error for Error {}

/// Result of parsing wire bytes.
pub type Result<T> = core::result::Result<T, Error>;
