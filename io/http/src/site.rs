//! Which web pages may talk to the server: none but its own.
//!
//! A browser on the operator's desk can reach a control port that the attacker cannot, and
//! any page it opens can make it send requests there. Three rules keep such pages out:
//! - **Origin.** A request carrying an `Origin` header must come from the server's own origin:
//!   the scheme it serves and the host and port the request is addressed to (its `Host`).
//!   `Origin: null` (sandboxed frames, `file:` pages) is foreign.
//! - **Fetch metadata.** `Sec-Fetch-Site` other than `same-origin` or `none` (typed into the
//!   address bar) is refused: `same-site` is a page on the same host at another port.
//! - **Cross-site-capable writes.** A method other than GET, HEAD and OPTIONS with a body the
//!   browser may send cross-site without asking (`Content-Type` `text/plain`,
//!   `application/x-www-form-urlencoded`, `multipart/form-data`, or a body without a type)
//!   is refused: such "simple" requests are sent before any CORS check, and older browsers
//!   sent them without an `Origin`. API clients send `application/json` (or no body).
//!
//! **DNS rebinding** (a name of the attacker's that resolves to the control port's address
//! makes the page same-origin) is closed by the `Host` check of [`HostPolicy::Checked`]:
//! only IP literals, `localhost` and the configured names are answered.

use hyper::header::{HeaderMap, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use hyper::Method;

/// Which `Host` headers are answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HostPolicy {
    /// Any (for servers with nothing to protect from a rebinding page).
    #[default]
    Any,
    /// IP literals, `localhost`, and these names (case-insensitive, any port).
    Checked(Vec<String>),
}

/// Why a request was refused (answered 403 with this text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// Host and port of a `host[:port]` (IPv6 literals in brackets), lower-cased.
fn split_host_port(s: &str, default_port: u16) -> Option<(String, u16)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after {
            "" => default_port,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        (format!("[{h}]"), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (s.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

fn is_ip_literal(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

/// `type/subtype` of a `Content-Type`, lower-cased.
fn essence(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Checks a request's `Host`, `Origin`, `Sec-Fetch-Site` and, for writes, its body type.
/// `tls` says which scheme the server speaks. An `Origin` on a request without `Host` (which
/// no browser sends) cannot be matched and is refused.
pub fn check(
    policy: &HostPolicy,
    tls: bool,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    let scheme = if tls { "https" } else { "http" };
    let default_port = if tls { 443 } else { 80 };
    let text = |h: &hyper::header::HeaderName| -> Result<Option<&str>, Refusal> {
        match headers.get(h) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(Some)
                .map_err(|_| Refusal(format!("the {h} header is not ASCII"))),
        }
    };
    let host = match text(&HOST)? {
        None => None,
        Some(h) => Some(
            split_host_port(h, default_port)
                .ok_or_else(|| Refusal(format!("Host {h:?} is not host[:port]")))?,
        ),
    };
    if let (HostPolicy::Checked(names), Some((h, _))) = (policy, &host) {
        let bare = h.trim_end_matches('.');
        let ok = is_ip_literal(bare)
            || bare == "localhost"
            || names
                .iter()
                .any(|n| n.trim_end_matches('.').eq_ignore_ascii_case(bare));
        if !ok {
            return Err(Refusal(format!(
                "Host {h:?} is not answered here (DNS rebinding guard): use an IP address, \
                 localhost, or a name configured as one of this server's host names"
            )));
        }
    }
    if let Some(o) = text(&ORIGIN)? {
        let foreign = || Refusal(format!("cross-origin request refused (Origin {o:?})"));
        let rest = o
            .strip_prefix(scheme)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(foreign)?;
        let origin = split_host_port(rest, default_port).ok_or_else(foreign)?;
        if host.as_ref() != Some(&origin) {
            return Err(foreign());
        }
    }
    if let Some(s) = headers.get("sec-fetch-site") {
        let s = s.to_str().unwrap_or("?");
        if !s.eq_ignore_ascii_case("same-origin") && !s.eq_ignore_ascii_case("none") {
            return Err(Refusal(format!(
                "cross-site request refused (Sec-Fetch-Site: {s})"
            )));
        }
    }
    if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        let has_body = headers.contains_key(TRANSFER_ENCODING)
            || text(&CONTENT_LENGTH)?.is_some_and(|l| l.trim() != "0");
        let simple = match text(&CONTENT_TYPE)? {
            Some(ct) => matches!(
                essence(ct).as_str(),
                "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
            ),
            None => has_body,
        };
        if simple {
            return Err(Refusal(format!(
                "{method} with a body a browser may send from any site refused: send \
                 Content-Type: application/json"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn ok(policy: &HostPolicy, m: Method, pairs: &[(&'static str, &'static str)]) -> bool {
        check(policy, false, &m, &req(pairs)).is_ok()
    }

    #[test]
    fn same_origin_passes_and_foreign_origins_do_not() {
        let p = HostPolicy::Any;
        assert!(ok(&p, Method::GET, &[("host", "127.0.0.1:9100")]));
        assert!(ok(&p, Method::GET, &[]));
        assert!(ok(
            &p,
            Method::POST,
            &[
                ("host", "127.0.0.1:9100"),
                ("origin", "http://127.0.0.1:9100")
            ]
        ));
        assert!(ok(
            &p,
            Method::GET,
            &[
                ("host", "LOCALHOST:9100"),
                ("origin", "http://localhost:9100")
            ]
        ));
        assert!(ok(
            &p,
            Method::GET,
            &[("host", "[::1]"), ("origin", "http://[::1]:80")]
        ));
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:3000",
            "https://127.0.0.1:9100",
            "null",
            "http://127.0.0.1:9100.evil.example",
            "",
        ] {
            let mut h = req(&[("host", "127.0.0.1:9100")]);
            h.insert(ORIGIN, origin.parse().unwrap());
            assert!(check(&p, false, &Method::POST, &h).is_err(), "{origin}");
        }
        // Without a Host there is nothing to match.
        assert!(!ok(&p, Method::GET, &[("origin", "http://127.0.0.1:9100")]));
    }

    #[test]
    fn fetch_metadata_and_simple_cross_site_writes_are_refused() {
        let p = HostPolicy::Any;
        assert!(!ok(&p, Method::POST, &[("sec-fetch-site", "cross-site")]));
        assert!(!ok(&p, Method::GET, &[("sec-fetch-site", "same-site")]));
        assert!(ok(&p, Method::GET, &[("sec-fetch-site", "same-origin")]));
        assert!(ok(&p, Method::GET, &[("sec-fetch-site", "none")]));
        assert!(!ok(
            &p,
            Method::POST,
            &[
                ("content-type", "text/plain;charset=UTF-8"),
                ("content-length", "2")
            ]
        ));
        assert!(!ok(
            &p,
            Method::POST,
            &[("content-type", "application/x-www-form-urlencoded")]
        ));
        assert!(!ok(
            &p,
            Method::PUT,
            &[("content-type", "multipart/form-data; boundary=x")]
        ));
        assert!(!ok(&p, Method::POST, &[("content-length", "5")]));
        assert!(!ok(&p, Method::POST, &[("transfer-encoding", "chunked")]));
        assert!(ok(
            &p,
            Method::POST,
            &[("content-type", "application/json")]
        ));
        assert!(ok(&p, Method::POST, &[("content-length", "0")]));
        assert!(ok(&p, Method::POST, &[]));
        assert!(ok(&p, Method::GET, &[("content-type", "text/plain")]));
    }

    #[test]
    fn checked_hosts_answer_ip_literals_localhost_and_names() {
        let p = HostPolicy::Checked(vec!["collector.example".into()]);
        for h in [
            "127.0.0.1:9100",
            "10.1.2.3",
            "[::1]:9100",
            "localhost:9100",
            "Collector.Example:9100",
            "collector.example.",
        ] {
            let mut m = HeaderMap::new();
            m.insert(HOST, h.parse().unwrap());
            assert!(check(&p, false, &Method::GET, &m).is_ok(), "{h}");
        }
        for h in [
            "evil.example:9100",
            "127.0.0.1.nip.io:9100",
            "",
            "a:b:c",
            "[::1",
        ] {
            let mut m = HeaderMap::new();
            m.insert(HOST, h.parse().unwrap());
            assert!(check(&p, false, &Method::GET, &m).is_err(), "{h}");
        }
        assert!(ok(
            &HostPolicy::Any,
            Method::GET,
            &[("host", "evil.example")]
        ));
    }
}
