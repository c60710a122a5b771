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

            /// The struct whose counters are `values`, in declaration order (the inverse of
            /// [`Self::values`]; missing values are 0, extra ones ignored).
            pub fn from_values(values: &[u64]) -> Self {
                let mut it = values.iter().copied();
                Self { $( $field: it.next().unwrap_or(0), )* }
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
        assert_eq!(Demo::from_values(&a.values()), a);
        assert_eq!(
            Demo::from_values(&[7]),
            Demo {
                packets: 7,
                bytes: 0
            }
        );
    }
}

/// Writes the Prometheus text exposition format (version 0.0.4).
///
/// A document is a sequence of families: [`PromWriter::family`] writes a family's `# HELP` and
/// `# TYPE` lines and [`PromWriter::sample`] its samples, all before the next family starts.
/// Counter families get the `_total` suffix. Names follow the conventions
/// `promtool check metrics` checks: base units (`_seconds`, `_bytes`), and what tells series of
/// one quantity apart (a drop reason, a report kind) in a label, not in the name.
#[derive(Debug, Default)]
pub struct PromWriter {
    out: String,
    /// Full names of the families written so far, the current one last.
    families: Vec<String>,
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

/// Counters of a [`define_counters!`] struct exported as one family, each member one value of
/// the family's label (e.g. every `drop_*` counter as `drops_total{reason="..."}`).
#[derive(Debug, Clone, Copy)]
pub struct CounterGroup {
    /// Family name, without prefix and `_total`.
    pub family: &'static str,
    /// The family's help text.
    pub help: &'static str,
    /// The label that tells the members apart; empty for a group of one member, which renames
    /// that counter.
    pub label: &'static str,
    /// `(counter name, label value)` of each member.
    pub members: &'static [(&'static str, &'static str)],
}

impl CounterGroup {
    /// The group `counter` belongs to, if any.
    pub fn find<'g>(groups: &'g [CounterGroup], counter: &str) -> Option<&'g CounterGroup> {
        groups
            .iter()
            .find(|g| g.members.iter().any(|(c, _)| *c == counter))
    }
}

impl PromWriter {
    /// An empty document.
    pub fn new() -> PromWriter {
        PromWriter::default()
    }

    /// Starts family `name` (a counter's without `_total`): writes its `# HELP` and `# TYPE`.
    ///
    /// A family must be written once, with all its samples; starting one twice is a bug that
    /// debug builds catch here (a scraper would reject the document).
    pub fn family(&mut self, kind: PromKind, name: &str, help: &str) {
        use std::fmt::Write;
        let (full, t) = match kind {
            PromKind::Counter => (format!("{name}_total"), "counter"),
            PromKind::Gauge => (name.to_string(), "gauge"),
        };
        debug_assert!(
            !self.families.contains(&full),
            "metric family {full} written twice"
        );
        let help = help
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('\\', "\\\\");
        let _ = writeln!(self.out, "# HELP {full} {help}");
        let _ = writeln!(self.out, "# TYPE {full} {t}");
        self.families.push(full);
    }

    /// Writes one sample of the family last started, with `labels`.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        use std::fmt::Write;
        let PromWriter { out, families } = self;
        let name = families.last().expect("a sample belongs to a family");
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"");
                for c in v.chars() {
                    match c {
                        '\\' => out.push_str("\\\\"),
                        '"' => out.push_str("\\\""),
                        '\n' => out.push_str("\\n"),
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            out.push('}');
        }
        let _ = if value.is_nan() {
            writeln!(out, " NaN")
        } else if value.is_infinite() {
            writeln!(out, " {}Inf", if value > 0.0 { '+' } else { '-' })
        } else if value.fract() == 0.0 && value.abs() < 9.0e15 {
            writeln!(out, " {}", value as i64)
        } else {
            // Debug, unlike Display, writes 6.8e-44 rather than 47 zeros and the digits.
            writeln!(out, " {value:?}")
        };
    }

    /// A summary family `name`: one sample per `(quantile, value)`, then `name_sum` and
    /// `name_count` (the Prometheus summary layout).
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        quantiles: &[(&str, f64)],
        sum: f64,
        count: u64,
    ) {
        use std::fmt::Write;
        debug_assert!(
            !self.families.iter().any(|f| f == name),
            "metric family {name} written twice"
        );
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} summary");
        self.families.push(name.to_string());
        for (q, v) in quantiles {
            self.sample(&[("quantile", q)], *v);
        }
        let _ = writeln!(self.out, "{name}_sum {sum:?}");
        let _ = writeln!(self.out, "{name}_count {count}");
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, kind: PromKind, name: &str, help: &str, value: f64) {
        self.family(kind, name, help);
        self.sample(&[], value);
    }

    /// Writes every counter of a [`define_counters!`] struct for a set of rows (label values
    /// and the struct's values, e.g. one row per worker): the members of each group as one
    /// labelled family, at the place of its first member; every other counter as a family of
    /// its own, `{prefix}_{name}_total`.
    pub fn counter_families(
        &mut self,
        prefix: &str,
        info: &[CounterInfo],
        groups: &[CounterGroup],
        rows: &[PromRow<'_>],
    ) {
        let mut written: Vec<&str> = Vec::new();
        for (i, ci) in info.iter().enumerate() {
            let Some(g) = CounterGroup::find(groups, ci.name) else {
                self.family(PromKind::Counter, &format!("{prefix}_{}", ci.name), ci.help);
                for (labels, values) in rows {
                    let l: Vec<(&str, &str)> =
                        labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    self.sample(&l, values[i] as f64);
                }
                continue;
            };
            if written.contains(&g.family) {
                continue;
            }
            written.push(g.family);
            debug_assert!(!g.label.is_empty() || g.members.len() == 1, "{}", g.family);
            self.family(PromKind::Counter, &format!("{prefix}_{}", g.family), g.help);
            for (labels, values) in rows {
                for (counter, value) in g.members {
                    let Some(j) = info.iter().position(|c| c.name == *counter) else {
                        debug_assert!(false, "{counter} is no counter of {prefix}");
                        continue;
                    };
                    let mut l: Vec<(&str, &str)> =
                        labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    if !g.label.is_empty() {
                        l.push((g.label, value));
                    }
                    self.sample(&l, values[j] as f64);
                }
            }
        }
    }

    /// Writes `dta_build_info{version, profile, features} 1`: the version (the crate's
    /// `CARGO_PKG_VERSION`), `release` or `debug` (debug assertions on), and the optional
    /// cargo features compiled in (comma-separated, `none` without any).
    pub fn build_info(&mut self, version: &str, features: &[&str]) {
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let features = if features.is_empty() {
            "none".to_string()
        } else {
            features.join(",")
        };
        self.family(
            PromKind::Gauge,
            "dta_build_info",
            "Always 1; the labels describe the build (version, profile, optional features).",
        );
        self.sample(
            &[
                ("version", version),
                ("profile", profile),
                ("features", &features),
            ],
            1.0,
        );
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod prom_tests {
    use super::*;

    // Only what the exporter needs of the struct is used here.
    #[allow(dead_code)]
    mod pipe {
        define_counters!(
            /// Test counters.
            pub struct Pipe {
                /// Reports received.
                received,
                /// Dropped: too short.
                drop_short,
                /// Dropped: no store.
                drop_no_store,
                /// Frames out.
                frames_out,
            }
        );
    }
    use pipe::Pipe;

    const GROUPS: &[CounterGroup] = &[
        CounterGroup {
            family: "drops",
            help: "Reports dropped, by reason.",
            label: "reason",
            members: &[("drop_short", "short"), ("drop_no_store", "no_store")],
        },
        CounterGroup {
            family: "frames",
            help: "Frames sent.",
            label: "",
            members: &[("frames_out", "")],
        },
    ];

    #[test]
    fn exposition_format() {
        let mut w = PromWriter::new();
        w.family(PromKind::Counter, "dta_x", "Things\n  counted.");
        w.sample(&[("worker", "0")], 3.0);
        w.sample(&[("worker", "1")], 4.0);
        w.family(PromKind::Gauge, "dta_load", "Load \"factor\" \\.");
        w.sample(&[("store", "a\"b\\\n")], 0.25);
        w.sample(&[], f64::NAN);
        w.sample(&[], f64::INFINITY);
        w.sample(&[], f64::NEG_INFINITY);
        w.single(PromKind::Gauge, "dta_big", "Big.", 1.5e16);
        w.single(PromKind::Gauge, "dta_tiny", "Tiny.", 6.5e-44);
        let s = w.finish();
        assert_eq!(
            s,
            "# HELP dta_x_total Things counted.\n# TYPE dta_x_total counter\n\
             dta_x_total{worker=\"0\"} 3\ndta_x_total{worker=\"1\"} 4\n\
             # HELP dta_load Load \"factor\" \\\\.\n# TYPE dta_load gauge\n\
             dta_load{store=\"a\\\"b\\\\\\n\"} 0.25\ndta_load NaN\ndta_load +Inf\ndta_load -Inf\n\
             # HELP dta_big Big.\n# TYPE dta_big gauge\ndta_big 1.5e16\n\
             # HELP dta_tiny Tiny.\n# TYPE dta_tiny gauge\ndta_tiny 6.5e-44\n"
        );
    }

    #[test]
    fn grouped_counters_become_labelled_families() {
        let rows: Vec<PromRow<'_>> = (0..2)
            .map(|w| {
                let c = Pipe {
                    received: 10 + w,
                    drop_short: 1,
                    drop_no_store: 2 + w,
                    frames_out: 7,
                };
                (vec![("worker", w.to_string())], c.values())
            })
            .collect();
        let mut w = PromWriter::new();
        w.counter_families("dta_t", Pipe::INFO, GROUPS, &rows);
        let s = w.finish();
        assert_eq!(
            s,
            "# HELP dta_t_received_total Reports received.\n# TYPE dta_t_received_total counter\n\
             dta_t_received_total{worker=\"0\"} 10\ndta_t_received_total{worker=\"1\"} 11\n\
             # HELP dta_t_drops_total Reports dropped, by reason.\n# TYPE dta_t_drops_total counter\n\
             dta_t_drops_total{worker=\"0\",reason=\"short\"} 1\n\
             dta_t_drops_total{worker=\"0\",reason=\"no_store\"} 2\n\
             dta_t_drops_total{worker=\"1\",reason=\"short\"} 1\n\
             dta_t_drops_total{worker=\"1\",reason=\"no_store\"} 3\n\
             # HELP dta_t_frames_total Frames sent.\n# TYPE dta_t_frames_total counter\n\
             dta_t_frames_total{worker=\"0\"} 7\ndta_t_frames_total{worker=\"1\"} 7\n"
        );
    }

    #[test]
    fn build_info_names_version_profile_and_features() {
        let mut w = PromWriter::new();
        w.build_info("1.2.3", &["af_xdp", "dpdk"]);
        let s = w.finish();
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        assert!(s.ends_with(&format!(
            "dta_build_info{{version=\"1.2.3\",profile=\"{profile}\",features=\"af_xdp,dpdk\"}} 1\n"
        )));
        let mut w = PromWriter::new();
        w.build_info("1.2.3", &[]);
        assert!(w.finish().contains("features=\"none\""));
    }
}
