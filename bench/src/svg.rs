//! Hand-written SVG charts for the benchmark figures (no plotting dependency): lines over a
//! numeric x axis, or grouped bars over named categories; one quantity on the y axis; a
//! caption saying how and where the numbers were measured.

use std::fmt::Write;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
    /// Draw dashed (e.g. a formula next to measurements).
    pub dashed: bool,
}

/// A chart: axes, labels and series.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Y-axis label.
    pub y_label: String,
    /// Logarithmic x axis (base 2 ticks).
    pub log_x: bool,
    /// Logarithmic y axis (base 10 ticks).
    pub log_y: bool,
    /// The lines (or, with `categories`, the bar groups: point x = 1-based category index).
    pub series: Vec<Series>,
    /// Named categories on the x axis: drawn as grouped bars, a dashed series as a marker
    /// across its category. Empty: a line chart over numeric x.
    pub categories: Vec<String>,
    /// Under the chart: runs, machine, date.
    pub caption: String,
    /// Bars: print each bar's value over it; a bar a log axis cannot draw (0) is labelled `0`
    /// on the axis.
    pub value_labels: bool,
}

const W: f64 = 860.0;
const H: f64 = 440.0;
const L: f64 = 80.0;
/// The right margin holds the legend.
const R: f64 = 230.0;
const T: f64 = 40.0;
const B: f64 = 80.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A number in short engineering form (12.3M, 4.5k, 0.012).
pub fn short(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        format!("{}G", trim(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e3 {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else if a >= 1e-3 || a == 0.0 {
        trim(format!("{v:.3}"))
    } else {
        format!("{v:.1e}")
    }
}

/// A bar's value label: three significant digits (0.19, 67, 92.8, 262), engineering form from
/// 1,000 up.
pub fn label(v: f64) -> String {
    if v.abs() >= 1000.0 || v == 0.0 || !v.is_finite() {
        return short(v);
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// An x tick label: powers of two as 2^k (superscript) on a base-2 axis.
fn x_tick(v: f64, log2: bool) -> String {
    if log2 && v >= 1.0 && v.log2().fract() == 0.0 && v >= 64.0 {
        format!(
            r#"2<tspan baseline-shift="super" font-size="9">{}</tspan>"#,
            v.log2() as i32
        )
    } else {
        short(v)
    }
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) for about five ticks over `range`.
fn nice_step(range: f64) -> f64 {
    let raw = (range / 5.0).max(1e-12);
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

impl Chart {
    /// Renders the chart as an SVG document.
    pub fn render(&self) -> String {
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .filter(|(x, y)| (!self.log_x || *x > 0.0) && (!self.log_y || *y > 0.0))
            .collect();
        let tx = |x: f64| if self.log_x { x.log2() } else { x };
        let ty = |y: f64| if self.log_y { y.log10() } else { y };
        let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
            (a.min(tx(p.0)), b.max(tx(p.0)))
        });
        let (mut y0, mut y1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
            (a.min(ty(p.1)), b.max(ty(p.1)))
        });
        if pts.is_empty() {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        let bars = !self.categories.is_empty();
        if bars {
            (x0, x1) = (0.5, self.categories.len() as f64 + 0.5);
        }
        let mut y_step = 0.0;
        if !self.log_y {
            y0 = y0.min(0.0);
            y_step = nice_step(y1 - y0);
            y1 = (y1 / y_step).ceil() * y_step;
            if y1 <= y0 {
                y1 = y0 + y_step;
            }
        } else {
            y0 = y0.floor();
            y1 = y1.ceil();
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if y1 <= y0 {
            y1 = y0 + 1.0;
        }
        let px = |x: f64| L + (tx(x) - x0) / (x1 - x0) * (W - L - R);
        let py = |y: f64| H - B - (ty(y) - y0) / (y1 - y0) * (H - T - B);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            W / 2.0,
            esc(&self.title)
        );
        // Axes.
        let _ = writeln!(
            s,
            r#"<path d="M{L} {T} V{} H{}" stroke="black" fill="none"/>"#,
            H - B,
            W - R
        );
        // Ticks.
        let xt: Vec<f64> = if bars {
            Vec::new()
        } else if self.log_x {
            (x0.floor() as i32..=x1.ceil() as i32)
                .map(|e| 2f64.powi(e))
                .filter(|v| tx(*v) >= x0 - 1e-9 && tx(*v) <= x1 + 1e-9)
                .collect()
        } else {
            let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            xs.dedup();
            if xs.len() > 12 {
                (0..=5).map(|i| x0 + (x1 - x0) * i as f64 / 5.0).collect()
            } else {
                xs
            }
        };
        for v in xt {
            let x = px(v);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="black"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                H - B,
                H - B + 5.0,
                H - B + 18.0,
                x_tick(v, self.log_x)
            );
        }
        for (i, name) in self.categories.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                px(i as f64 + 1.0),
                H - B + 18.0,
                esc(name)
            );
        }
        let yt: Vec<f64> = if self.log_y {
            (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect()
        } else {
            let n = ((y1 - y0) / y_step).round() as i32;
            (0..=n).map(|i| y0 + y_step * i as f64).collect()
        };
        for v in yt {
            let y = py(v);
            let _ = writeln!(
                s,
                r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                L,
                W - R,
                L - 6.0,
                y + 4.0,
                short(v)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (L + W - R) / 2.0,
            H - B + 40.0,
            esc(&self.x_label)
        );
        if !self.caption.is_empty() {
            let _ = writeln!(
                s,
                r##"<text x="{L}" y="{}" fill="#555" font-size="11">{}</text>"##,
                H - 12.0,
                esc(&self.caption)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
            (T + H - B) / 2.0,
            (T + H - B) / 2.0,
            esc(&self.y_label)
        );
        // Grouped bars: the solid series share each category's slot; dashed ones are markers.
        let solid = self.series.iter().filter(|s| !s.dashed).count().max(1) as f64;
        let slot = (px(1.5) - px(0.5)) * 0.8;
        // Where bars start: the axis (on a log axis, its lowest decade).
        let base = if self.log_y { H - B } else { py(y0.max(0.0)) };
        let mut bar_i = 0.0;
        for (i, se) in self.series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            if bars {
                let dash = if se.dashed {
                    r#" stroke-dasharray="6 4""#
                } else {
                    ""
                };
                for &(x, y) in se
                    .points
                    .iter()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                {
                    let left = px(x) - slot / 2.0;
                    if se.dashed {
                        let _ = writeln!(
                            s,
                            r#"<line x1="{left:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2"{dash}/>"#,
                            py(y),
                            left + slot,
                            py(y)
                        );
                    } else {
                        let w = slot / solid;
                        let cx = left + w * bar_i + w * 0.45;
                        if self.log_y && y <= 0.0 {
                            if self.value_labels {
                                let _ = writeln!(
                                    s,
                                    r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">0</text>"#,
                                    base - 4.0
                                );
                            }
                            continue;
                        }
                        let _ = writeln!(
                            s,
                            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{c}"/>"#,
                            left + w * bar_i,
                            py(y),
                            w * 0.9,
                            (base - py(y)).max(0.0)
                        );
                        if self.value_labels {
                            let _ = writeln!(
                                s,
                                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                                py(y) - 4.0,
                                label(y)
                            );
                        }
                    }
                }
                if !se.dashed {
                    bar_i += 1.0;
                }
                let ly = T + 8.0 + 18.0 * i as f64;
                let lx = W - R + 14.0;
                let _ = writeln!(
                    s,
                    r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="{}"{dash}/><text x="{}" y="{}">{}</text>"#,
                    lx,
                    lx + 24.0,
                    if se.dashed { 2 } else { 8 },
                    lx + 30.0,
                    ly + 4.0,
                    esc(&se.label)
                );
                continue;
            }
            let ps: Vec<(f64, f64)> = se
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .filter(|(x, y)| (!self.log_x || *x > 0.0) && (!self.log_y || *y > 0.0))
                .collect();
            let d: Vec<String> = ps
                .iter()
                .enumerate()
                .map(|(j, (x, y))| {
                    format!(
                        "{}{:.1} {:.1}",
                        if j == 0 { 'M' } else { 'L' },
                        px(*x),
                        py(*y)
                    )
                })
                .collect();
            let dash = if se.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<path d="{}" stroke="{c}" stroke-width="2" fill="none"{dash}/>"#,
                d.join(" ")
            );
            if !se.dashed {
                for (x, y) in &ps {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                        px(*x),
                        py(*y)
                    );
                }
            }
            let ly = T + 8.0 + 18.0 * i as f64;
            let lx = W - R + 14.0;
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx,
                lx + 24.0,
                lx + 30.0,
                ly + 4.0,
                esc(&se.label)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Charts stacked into one SVG document, top to bottom, under a heading.
pub fn stack(heading: &str, charts: &[Chart]) -> String {
    const HEAD: f64 = 34.0;
    let h = HEAD + H * charts.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="17" font-weight="bold">{}</text>"#,
        W / 2.0,
        esc(heading)
    );
    for (i, c) in charts.iter().enumerate() {
        let one = c.render();
        let at = format!(r#"<svg x="0" y="{}" "#, HEAD + H * i as f64);
        s.push_str(&one.replacen("<svg ", &at, 1));
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_well_formed_svg() {
        let c = Chart {
            title: "Append <throughput>".into(),
            x_label: "batch".into(),
            y_label: "reports/s".into(),
            log_x: true,
            log_y: false,
            series: vec![
                Series {
                    label: "dta".into(),
                    points: vec![(1.0, 1e6), (2.0, 2e6), (16.0, 9e6)],
                    dashed: false,
                },
                Series {
                    label: "formula".into(),
                    points: vec![(1.0, 0.5e6), (16.0, 1e7)],
                    dashed: true,
                },
            ],
            categories: Vec::new(),
            caption: "3 runs; test machine".into(),
            value_labels: false,
        };
        let s = c.render();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("&lt;throughput&gt;"));
        assert_eq!(s.matches("<circle").count(), 3);
        assert_eq!(short(12_300_000.0), "12.3M");
        assert_eq!(label(67.031), "67");
        assert_eq!(label(92.798), "92.8");
        assert_eq!(label(261.668), "262");
        assert_eq!(label(0.19), "0.19");
        assert_eq!(label(0.4), "0.4");
        assert_eq!(label(2050.0), "2.05k");
        assert_eq!(short(0.05), "0.05");
        assert_eq!(short(2.0), "2");
        assert_eq!(nice_step(1.0), 0.2);
        assert!(s.contains("3 runs; test machine"));
        assert!(x_tick(32768.0, true).contains(">15</tspan>"));
        assert_eq!(x_tick(16.0, true), "16");
    }

    /// Categories are bars with their names on the axis, and a dashed series is a marker.
    #[test]
    fn categories_render_as_bars() {
        let c = Chart {
            title: "per primitive".into(),
            x_label: "primitive".into(),
            y_label: "M reports/s".into(),
            log_x: false,
            log_y: false,
            series: vec![
                Series {
                    label: "pipeline".into(),
                    points: vec![(1.0, 30.0), (2.0, 10.0)],
                    dashed: false,
                },
                Series {
                    label: "+ RNIC".into(),
                    points: vec![(1.0, 20.0), (2.0, 4.0)],
                    dashed: false,
                },
                Series {
                    label: "target".into(),
                    points: vec![(1.0, 25.0), (2.0, 8.0)],
                    dashed: true,
                },
            ],
            categories: vec!["Append".into(), "Key-Write".into()],
            caption: String::new(),
            value_labels: false,
        };
        let s = c.render();
        assert_eq!(s.matches("<rect x=").count(), 4);
        assert!(s.contains(">Append</text>") && s.contains(">Key-Write</text>"));
        assert!(!s.contains("<circle"));
    }

    /// On a log axis bars start at the axis, carry their values, and a 0 (which a log axis
    /// cannot draw) is written as `0`; stacked charts nest in one document.
    #[test]
    fn log_bars_label_values_and_zeros() {
        let c = Chart {
            title: "CPU".into(),
            x_label: String::new(),
            y_label: "ns".into(),
            log_x: false,
            log_y: true,
            series: vec![Series {
                label: "total".into(),
                points: vec![(1.0, 50.0), (2.0, 5000.0), (3.0, 0.0)],
                dashed: false,
            }],
            categories: vec!["a".into(), "b".into(), "c".into()],
            caption: String::new(),
            value_labels: true,
        };
        let s = c.render();
        assert_eq!(s.matches("<rect x=").count(), 2);
        for label in [
            ">50</text>",
            ">5k</text>",
            ">0</text>",
            ">10</text>",
            ">10k</text>",
        ] {
            assert!(s.contains(label), "{label}");
        }
        for r in s.lines().filter(|l| l.starts_with("<rect x=")) {
            let num = |k: &str| -> f64 {
                let i = r.find(k).unwrap() + k.len();
                r[i..].split('"').next().unwrap().parse().unwrap()
            };
            assert!(
                (num(" y=\"") + num("height=\"") - (H - B)).abs() < 0.2,
                "{r}"
            );
        }
        let st = stack("Both", &[c.clone(), c]);
        assert!(st.starts_with("<svg") && st.ends_with("</svg>\n"));
        assert_eq!(st.matches("<svg").count(), 3);
        assert_eq!(st.matches("</svg>").count(), 3);
        assert!(st.contains(&format!(r#"<svg x="0" y="{}" "#, 34.0 + H)));
    }
}
