//! The query engine: reads store memory without ever writing it (except where noted) and
//! without a database.

pub mod append;
pub mod keywrite;
