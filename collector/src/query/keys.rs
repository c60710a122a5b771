//! The key syntax operators type (CLI arguments, HTTP paths).
//!
//! A key is either
//! - **hex**: 1..=16 bytes as an even number of hex digits, optionally after `0x`
//!   (`0a000001`, `0x0a000001`), hashed exactly as given; or
//! - an **IPv4 5-tuple** `SRC:SPORT-DST:DPORT/PROTO` (`10.0.0.1:8080-10.0.0.2:80/udp`; PROTO is
//!   `tcp`, `udp`, `icmp` or a number), which becomes the 13-byte flow key the workload and
//!   `proto/PROTOCOL.md` use: source IP, destination IP, protocol, source port, destination
//!   port, all big-endian.

use std::net::Ipv4Addr;

use dta_proto::Key;

/// Parses a key in either syntax (see the module docs).
pub fn parse_key(s: &str) -> Result<Key, String> {
    let s = s.trim();
    if s.contains('/') || s.contains('-') {
        return parse_five_tuple(s);
    }
    let hex = s.strip_prefix("0x").unwrap_or(s);
    let bytes = parse_hex(hex)?;
    Key::new(&bytes).ok_or_else(|| format!("key {s:?} must be 1..=16 bytes"))
}

/// Parses hex digits into bytes.
pub fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.is_empty() || hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{hex:?} is not a key: use an even number of hex digits or SRC:SPORT-DST:DPORT/PROTO"
        ));
    }
    Ok((0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex"))
        .collect())
}

fn parse_five_tuple(s: &str) -> Result<Key, String> {
    let bad = |why: &str| format!("{s:?} is not a 5-tuple SRC:SPORT-DST:DPORT/PROTO: {why}");
    let (ends, proto) = s.rsplit_once('/').ok_or_else(|| bad("missing /PROTO"))?;
    let proto: u8 = match proto.to_ascii_lowercase().as_str() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        p => p.parse().map_err(|_| bad("unknown protocol"))?,
    };
    let (src, dst) = ends.split_once('-').ok_or_else(|| bad("missing -"))?;
    let end = |e: &str| -> Result<(Ipv4Addr, u16), String> {
        let (ip, port) = e.rsplit_once(':').ok_or_else(|| bad("missing :PORT"))?;
        Ok((
            ip.parse().map_err(|_| bad("bad IPv4 address"))?,
            port.parse().map_err(|_| bad("bad port"))?,
        ))
    };
    let ((sip, sport), (dip, dport)) = (end(src)?, end(dst)?);
    let mut k = [0u8; 13];
    k[0..4].copy_from_slice(&sip.octets());
    k[4..8].copy_from_slice(&dip.octets());
    k[8] = proto;
    k[9..11].copy_from_slice(&sport.to_be_bytes());
    k[11..13].copy_from_slice(&dport.to_be_bytes());
    Ok(Key::new(&k).expect("13 bytes"))
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_tuple_matches_the_protocol_example() {
        // proto/PROTOCOL.md: 10.0.0.1 -> 10.0.0.2 UDP 8080 -> 80.
        let k = parse_key("10.0.0.1:8080-10.0.0.2:80/udp").unwrap();
        assert_eq!(to_hex(k.as_bytes()), "0a0000010a000002111f900050");
        assert_eq!(
            parse_key("10.0.0.1:8080-10.0.0.2:80/17").unwrap(),
            k,
            "numeric protocol"
        );
    }

    #[test]
    fn hex_keys() {
        let k = parse_key("0x0a000001").unwrap();
        assert_eq!(k.as_bytes(), &[10, 0, 0, 1]);
        assert_eq!(parse_key("ff").unwrap().as_bytes(), &[255]);
        for bad in [
            "",
            "0x",
            "abc",
            "zz",
            &"00".repeat(17),
            "1.2.3.4:1-5.6.7.8:2/xyz",
        ] {
            assert!(parse_key(bad).is_err(), "{bad:?}");
        }
        assert!(parse_key("1.2.3.4:1-5.6.7.8/tcp").is_err());
        assert!(parse_key("1.2.3.4:99999-5.6.7.8:1/tcp").is_err());
    }
}
