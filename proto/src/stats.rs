//! Plain-`u64` counter structs for per-core statistics, merged for `/metrics`.
//!
//! Hot paths bump ordinary fields of a struct they own (no atomics, no locks). A control thread
//! obtains copies (the owner publishes snapshots) and merges them. [`define_counters!`] declares
//! such a struct together with the metadata an exporter needs: each counter's name (the
//! Prometheus metric suffix, named like the rxe/mlx5 counters operators already read) and help
//! text.

/// Metadata of one counter.
#[derive(Debug, Clone, Copy)]
pub struct CounterInfo {
    /// Metric name suffix, e.g. `out_of_seq_request`.
    pub name: &'static str,
    /// One-line help text.
    pub help: &'static str,
}

/// Declares a counter struct: `define_counters!(pub struct Foo { /// help\n name, ... })`.
///
/// The struct derives `Default`, `Clone`, `Copy`, `Debug`, `PartialEq`, and gets
/// `INFO: [CounterInfo; N]`, `values(&self) -> [u64; N]`, `merge(&mut self, &Self)` and
/// `iter(&self)` over `(CounterInfo, u64)`.
#[macro_export]
macro_rules! define_counters {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $( $(#[doc = $help:literal])+ $field:ident ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
        $vis struct $name {
            $( $(#[doc = $help])+ pub $field: u64, )*
        }

        impl $name {
            /// Name and help text of every counter, in declaration order.
            pub const INFO: &'static [$crate::stats::CounterInfo] = &[
                $( $crate::stats::CounterInfo {
                    name: stringify!($field),
                    help: concat!($($help),+),
                }, )*
            ];

            /// Every counter's value, in declaration order.
            pub fn values(&self) -> ::std::vec::Vec<u64> {
                vec![$( self.$field ),*]
            }

            /// Adds `other` into `self`, field by field.
            pub fn merge(&mut self, other: &Self) {
                $( self.$field = self.$field.wrapping_add(other.$field); )*
            }

            /// Iterates over `(info, value)` pairs.
            pub fn iter(&self) -> impl Iterator<Item = (&'static $crate::stats::CounterInfo, u64)> {
                Self::INFO.iter().zip(self.values())
            }

            /// The value of the counter called `name`, if there is one.
            pub fn get(&self, name: &str) -> Option<u64> {
                self.iter().find(|(i, _)| i.name == name).map(|(_, v)| v)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    define_counters!(
        /// Test counters.
        pub struct Demo {
            /// Packets seen.
            packets,
            /// Bytes seen.
            bytes,
        }
    );

    #[test]
    fn merge_and_iterate() {
        let mut a = Demo {
            packets: 1,
            bytes: 10,
        };
        a.merge(&Demo {
            packets: 2,
            bytes: 5,
        });
        assert_eq!(a.values(), vec![3, 15]);
        assert_eq!(Demo::INFO[0].name, "packets");
        assert_eq!(Demo::INFO[1].help.trim(), "Bytes seen.");
        assert_eq!(a.get("bytes"), Some(15));
        assert_eq!(a.get("nope"), None);
    }
}
