//! DTA translator (in progress).
