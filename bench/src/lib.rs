//! DTA bench (in progress).
