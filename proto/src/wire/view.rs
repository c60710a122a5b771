//! The boilerplate of a fixed-length packet view, declared once for every format in `proto`
//! (DTA sub-headers, InfiniBand transport headers, Telemetry Report headers, ZERO structures):
//! the struct over a buffer, its length `LEN`, `new_unchecked`, `new_checked` and `check_len`
//! that refuse a buffer shorter than the view, and `into_inner`. Accessors stay with each
//! format, over its own private `field` module.

/// Declares `pub struct $name<T: AsRef<[u8]>>`, `LEN = $len` bytes on the wire.
///
/// `fixed_view!(doc, Name, LEN)` refuses a short buffer with [`crate::wire::Error::Truncated`];
/// `fixed_view!(doc, Name, LEN, ErrorType, truncated_value)` with the format's own error.
macro_rules! fixed_view {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $crate::wire::view::fixed_view!(
            $(#[$doc])* $name,
            $len,
            $crate::wire::Error,
            $crate::wire::Error::Truncated
        );
    };
    ($(#[$doc:meta])* $name:ident, $len:expr, $err:ty, $truncated:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this view on the wire.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole view (extra bytes are
            /// allowed).
            #[inline]
            pub fn new_checked(buffer: T) -> ::core::result::Result<$name<T>, $err> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Refuses a buffer shorter than [`Self::LEN`].
            #[inline]
            pub fn check_len(&self) -> ::core::result::Result<(), $err> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($truncated)
                } else {
                    Ok(())
                }
            }

            /// Returns the underlying buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub(crate) use fixed_view;
