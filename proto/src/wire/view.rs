//! The boilerplate of a fixed-length packet view, declared once for the formats whose errors
//! are their own small enums (Telemetry Report headers, ZERO structures): the struct over a
//! buffer, `new_unchecked`, and `new_checked` that refuses a buffer shorter than the view.
//! Accessors stay with each format, over its own private `field` module.

/// Declares `pub struct $name<T: AsRef<[u8]>>` with `new_unchecked` and `new_checked`
/// (`Err($truncated)` if the buffer is shorter than `$len`, a constant in scope).
macro_rules! fixed_view {
    ($(#[$doc:meta])* $name:ident, $len:ident, $err:ty, $truncated:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            #[doc = concat!("Wraps a buffer of at least [`", stringify!($len), "`] bytes.")]
            #[inline]
            pub fn new_checked(buffer: T) -> Result<$name<T>, $err> {
                if buffer.as_ref().len() < $len {
                    return Err($truncated);
                }
                Ok($name { buffer })
            }
        }
    };
}

pub(crate) use fixed_view;
