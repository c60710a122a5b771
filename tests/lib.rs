//! Shared helpers for the end-to-end tests in this folder.
//!
//! - [`rxe_vm`]: a real RoCEv2 responder (Linux Soft-RoCE in a QEMU VM) for conformance tests.
//! - [`scratch`]: a test's own temp directory, removed when dropped.

pub mod harness;
pub mod rdma_feature;
pub mod rxe_vm;
pub mod scratch;
