//! DTA collector (in progress).
