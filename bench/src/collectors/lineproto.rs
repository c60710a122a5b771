//! InfluxDB line protocol (InfluxDB 1.x reference, "Line protocol"): one point per line,
//!
//! ```text
//! <measurement>[,<tag_key>=<tag_value>...] <field_key>=<field_value>[,...] [<timestamp>]
//! ```
//!
//! Escaping, as the reference specifies it: in measurements, commas and spaces; in tag keys,
//! tag values and field keys, commas, equals signs and spaces; in string field values (in
//! double quotes), double quotes and backslashes; each with a backslash. Integer fields end in
//! `i`; the timestamp is in the precision of the `/write` request (nanoseconds here).

/// A field value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// A string field.
    Str(&'a str),
    /// A signed 64-bit integer field (`i` suffix).
    Int(i64),
}

/// Lines of points, appended to one reusable buffer.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    /// The encoded lines, each ending in `\n`.
    pub buf: Vec<u8>,
    /// Points encoded.
    pub points: usize,
}

fn escape(out: &mut Vec<u8>, s: &str, special: &[u8]) {
    for &b in s.as_bytes() {
        if special.contains(&b) {
            out.push(b'\\');
        }
        out.push(b);
    }
}

fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    super::resp::push_u64(out, v.unsigned_abs());
}

impl Lines {
    /// Appends one point.
    pub fn point(
        &mut self,
        measurement: &str,
        tags: &[(&str, &str)],
        fields: &[(&str, Field<'_>)],
        timestamp_ns: Option<u64>,
    ) {
        let b = &mut self.buf;
        escape(b, measurement, b", ");
        for (k, v) in tags {
            b.push(b',');
            escape(b, k, b",= ");
            b.push(b'=');
            escape(b, v, b",= ");
        }
        for (i, (k, v)) in fields.iter().enumerate() {
            b.push(if i == 0 { b' ' } else { b',' });
            escape(b, k, b",= ");
            b.push(b'=');
            match v {
                Field::Str(s) => {
                    b.push(b'"');
                    escape(b, s, b"\"\\");
                    b.push(b'"');
                }
                Field::Int(n) => {
                    push_i64(b, *n);
                    b.push(b'i');
                }
            }
        }
        if let Some(t) = timestamp_ns {
            b.push(b' ');
            super::resp::push_u64(b, t);
        }
        b.push(b'\n');
        self.points += 1;
    }

    /// Forgets every point.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.points = 0;
    }
}

/// Lower-case hex of `bytes` in `out` (which must hold twice as many bytes), as a `&str`.
pub fn hex<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let out = &mut out[..bytes.len() * 2];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    std::str::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(m: &str, tags: &[(&str, &str)], fields: &[(&str, Field<'_>)], t: Option<u64>) -> String {
        let mut l = Lines::default();
        l.point(m, tags, fields, t);
        assert_eq!(l.points, 1);
        String::from_utf8(l.buf).unwrap()
    }

    /// The line protocol reference's own examples.
    #[test]
    fn the_references_examples() {
        assert_eq!(
            one(
                "weather",
                &[("location", "us-midwest")],
                &[("temperature", Field::Int(82))],
                Some(1465839830100400200)
            ),
            "weather,location=us-midwest temperature=82i 1465839830100400200\n"
        );
        assert_eq!(
            one(
                "weather",
                &[("location", "us,midwest")],
                &[("temperature", Field::Int(82))],
                Some(1465839830100400200)
            ),
            "weather,location=us\\,midwest temperature=82i 1465839830100400200\n"
        );
        assert_eq!(
            one(
                "weather",
                &[("location", "us-midwest")],
                &[("temp=rature", Field::Int(82))],
                None
            ),
            "weather,location=us-midwest temp\\=rature=82i\n"
        );
        assert_eq!(
            one(
                "weather",
                &[("location place", "us-midwest")],
                &[("temperature", Field::Int(82))],
                None
            ),
            "weather,location\\ place=us-midwest temperature=82i\n"
        );
        assert_eq!(
            one("wea,ther", &[], &[("temperature", Field::Int(82))], None),
            "wea\\,ther temperature=82i\n"
        );
        assert_eq!(
            one("wea ther", &[], &[("temperature", Field::Int(82))], None),
            "wea\\ ther temperature=82i\n"
        );
        assert_eq!(
            one(
                "weather",
                &[("location", "us-midwest")],
                &[("temperature_str", Field::Str("too\"hot\""))],
                None
            ),
            "weather,location=us-midwest temperature_str=\"too\\\"hot\\\"\"\n"
        );
        assert_eq!(
            one(
                "weather",
                &[],
                &[
                    ("temperature_str", Field::Str("too hot\\cold")),
                    ("n", Field::Int(-3))
                ],
                Some(0)
            ),
            "weather temperature_str=\"too hot\\\\cold\",n=-3i 0\n"
        );
    }

    #[test]
    fn hex_digits() {
        let mut b = [0u8; 8];
        assert_eq!(hex(&[0x0a, 0xff, 0x00], &mut b), "0aff00");
        assert_eq!(hex(&[], &mut b), "");
    }
}
