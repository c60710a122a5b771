//! The embedded software RNIC: a strict user-space RoCEv2 RC responder with Linux rxe's
//! semantics, driven by any `dta-io` backend.

pub mod cm;
pub mod counters;
pub mod responder;
