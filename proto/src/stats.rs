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

/// Writes the Prometheus text exposition format (version 0.0.4).
///
/// Each metric family gets its `# HELP` and `# TYPE` lines once, before its first sample;
/// samples of one family must be written together. Counter names get the `_total` suffix.
#[derive(Debug, Default)]
pub struct PromWriter {
    out: String,
    last: String,
}

/// One row of label values and the counter values that go with them.
pub type PromRow<'a> = (Vec<(&'a str, String)>, Vec<u64>);

/// Kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromKind {
    /// A monotonically increasing count.
    Counter,
    /// A value that goes up and down.
    Gauge,
}

impl PromWriter {
    /// An empty document.
    pub fn new() -> PromWriter {
        PromWriter::default()
    }

    /// Writes one sample of family `name` (without `_total`) with `labels`.
    pub fn sample(
        &mut self,
        kind: PromKind,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        use std::fmt::Write;
        let full = match kind {
            PromKind::Counter => format!("{name}_total"),
            PromKind::Gauge => name.to_string(),
        };
        if full != self.last {
            let help = help.trim().replace('\\', "\\\\").replace('\n', " ");
            let t = match kind {
                PromKind::Counter => "counter",
                PromKind::Gauge => "gauge",
            };
            let _ = writeln!(self.out, "# HELP {full} {help}");
            let _ = writeln!(self.out, "# TYPE {full} {t}");
            self.last = full.clone();
        }
        self.out.push_str(&full);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        if value.fract() == 0.0 && value.abs() < 9.0e15 {
            let _ = writeln!(self.out, " {}", value as i64);
        } else {
            let _ = writeln!(self.out, " {value}");
        }
    }

    /// Writes every counter of a [`define_counters!`] struct, one family each, for a set of
    /// label-value rows (e.g. one row per worker).
    pub fn counter_families<'a, I>(&mut self, prefix: &str, info: &[CounterInfo], rows: I)
    where
        I: IntoIterator<Item = PromRow<'a>> + Clone,
    {
        for (i, ci) in info.iter().enumerate() {
            let name = format!("{prefix}_{}", ci.name);
            for (labels, values) in rows.clone() {
                let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                self.sample(PromKind::Counter, &name, ci.help, &l, values[i] as f64);
            }
        }
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod prom_tests {
    use super::*;

    #[test]
    fn exposition_format() {
        let mut w = PromWriter::new();
        w.sample(
            PromKind::Counter,
            "dta_x",
            "Things.",
            &[("worker", "0")],
            3.0,
        );
        w.sample(
            PromKind::Counter,
            "dta_x",
            "Things.",
            &[("worker", "1")],
            4.0,
        );
        w.sample(
            PromKind::Gauge,
            "dta_load",
            "Load \"factor\".",
            &[("store", "a\"b")],
            0.25,
        );
        let s = w.finish();
        assert_eq!(
            s,
            "# HELP dta_x_total Things.\n# TYPE dta_x_total counter\ndta_x_total{worker=\"0\"} 3\ndta_x_total{worker=\"1\"} 4\n\
             # HELP dta_load Load \"factor\".\n# TYPE dta_load gauge\ndta_load{store=\"a\\\"b\"} 0.25\n"
        );
    }
}
