//! A small blocking client for ClickHouse's HTTP interface, and the RowBinary rows it inserts.
//!
//! One request per connection through the one HTTP client (`dta_http::client::send`), plain or over TLS
//! (an https `url`; the server's certificate is verified against `ca_file` or the system's
//! CAs, never accepted unchecked): a statement is POSTed as the body; an INSERT puts
//! `INSERT INTO t (cols) FORMAT RowBinary` in the `query` parameter and the rows in the body,
//! with a `Content-Length`, so a connection cut short is a truncated body ClickHouse refuses
//! instead of a partial insert. RowBinary (supported since long before 18.16) is the compact
//! format: little-endian integers, strings as a LEB128 length and the bytes, `DateTime` as
//! seconds in a `UInt32`.
//!
//! Every request has one deadline (`timeout_secs`) and the answer is capped ([`MAX_ANSWER`]).
//! The credentials travel only in the `Authorization` header: they are never part of a
//! [`ChError`] (an answer that echoes them back has them replaced by `[redacted]`), of a
//! `Debug` print, or of a log line.

use std::time::Duration;

use base64::Engine as _;
use dta_http::client::{ClientLimits, ClientRequest, ClientTls};

/// The largest ClickHouse answer read (the exporter's queries answer a few rows per list).
pub const MAX_ANSWER: usize = 16 << 20;
/// The longest ClickHouse error message kept (and logged), in bytes.
const MAX_MESSAGE: usize = 4096;
/// What a credential in a message is replaced by.
const REDACTED: &str = "[redacted]";

/// What went wrong talking to ClickHouse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChError {
    /// No answer: not reachable, the connection failed or timed out (the statement may or may
    /// not have run).
    Transport(String),
    /// ClickHouse answered with an error.
    Server {
        /// HTTP status.
        status: u16,
        /// ClickHouse's error code (`Code: 60, ...`), when the body has one.
        code: Option<u32>,
        /// The body, trimmed.
        message: String,
    },
}

impl ChError {
    /// An error that retrying cannot cure: wrong credentials, missing database or table,
    /// a statement ClickHouse cannot parse. Everything else (unreachable, overloaded,
    /// too many parts, a server restarting) is worth a retry.
    pub fn is_permanent(&self) -> bool {
        match self {
            ChError::Transport(_) => false,
            ChError::Server { code, status, .. } => match code {
                // SYNTAX_ERROR, UNKNOWN_TABLE, UNKNOWN_DATABASE, NO_SUCH_COLUMN_IN_TABLE,
                // UNKNOWN_USER, WRONG_PASSWORD, REQUIRED_PASSWORD, IP_ADDRESS_NOT_ALLOWED,
                // UNKNOWN_IDENTIFIER, THERE_IS_NO_COLUMN, READONLY, ACCESS_DENIED,
                // AUTHENTICATION_FAILED.
                Some(c) => [62, 60, 81, 16, 192, 193, 194, 195, 47, 8, 164, 497, 516].contains(c),
                None => (400..500).contains(status) && *status != 408 && *status != 429,
            },
        }
    }
}

impl std::fmt::Display for ChError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChError::Transport(e) => write!(f, "{e}"),
            ChError::Server {
                status, message, ..
            } => write!(f, "ClickHouse answered {status}: {message}"),
        }
    }
}

/// A ClickHouse server's HTTP interface.
#[derive(Clone)]
pub struct ClickHouse {
    /// `host:port`.
    pub addr: String,
    /// The database statements run in (`database=` parameter).
    pub database: String,
    auth: String,
    /// What must never appear in an error: the Basic token, `user:password`, the password.
    secrets: Vec<String>,
    tls: Option<ClientTls>,
    limits: ClientLimits,
}

impl std::fmt::Debug for ClickHouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouse")
            .field("addr", &self.addr)
            .field("database", &self.database)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// What [`url_encode`] leaves as it is: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a query parameter.
fn url_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

impl ClickHouse {
    /// A client of `addr` (`host:port`, plain HTTP) as `user` with `password`, in `database`;
    /// `timeout` bounds each request all told.
    pub fn new(
        addr: &str,
        database: &str,
        user: &str,
        password: &str,
        timeout: Duration,
    ) -> ClickHouse {
        let pair = format!("{user}:{password}");
        let auth = base64::engine::general_purpose::STANDARD.encode(&pair);
        let mut secrets = vec![auth.clone(), pair];
        // A short password would redact ordinary words; it is in the token and the pair.
        if password.len() >= 4 {
            secrets.push(password.to_string());
        }
        ClickHouse {
            addr: addr.to_string(),
            database: database.to_string(),
            auth,
            secrets,
            tls: None,
            limits: ClientLimits {
                timeout,
                max_body_bytes: MAX_ANSWER,
                ..ClientLimits::default()
            },
        }
    }

    /// The same client over TLS.
    pub fn with_tls(mut self, tls: ClientTls) -> ClickHouse {
        self.tls = Some(tls);
        self
    }

    /// The client `[export.clickhouse]` describes (url, database, user, password file,
    /// timeout, TLS).
    pub fn from_config(c: &super::config::ClickHouseExport) -> Result<ClickHouse, String> {
        let password = c.password()?;
        let ch = ClickHouse::new(
            &c.host_port()?,
            &c.database,
            &c.user,
            &password,
            Duration::from_secs(c.timeout_secs),
        );
        Ok(match c.tls()? {
            Some(t) => ch.with_tls(t),
            None => ch,
        })
    }

    /// `m` with every credential replaced, and cut to [`MAX_MESSAGE`] bytes.
    fn scrub(&self, m: &str) -> String {
        let mut out = m.to_string();
        for s in &self.secrets {
            if !s.is_empty() {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        if out.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str(" [...]");
        }
        out
    }

    fn transport(&self, e: &dyn std::fmt::Display) -> ChError {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        ChError::Transport(self.scrub(&format!("ClickHouse at {scheme}://{}: {e}", self.addr)))
    }

    /// POSTs `body` with the URL parameters `params`; the answer's body on 200.
    fn post(&self, params: &[(&str, &str)], body: &[u8]) -> Result<Vec<u8>, ChError> {
        let q: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect();
        let target = format!("/?{}", q.join("&"));
        let req = ClientRequest::new("POST", &target, body)
            .header("Authorization", format!("Basic {}", self.auth))
            .header("Content-Type", "application/octet-stream");
        let a = dta_http::client::send(&self.addr, self.tls.as_ref(), &req, &self.limits)
            .map_err(|e| self.transport(&e))?;
        if a.status == 200 {
            return Ok(a.body);
        }
        let message = self.scrub(String::from_utf8_lossy(&a.body).trim());
        let code = message
            .strip_prefix("Code: ")
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|c| c.parse().ok());
        Err(ChError::Server {
            status: a.status,
            code,
            message,
        })
    }

    /// Runs one statement in the database; its output (`FORMAT TabSeparated` by default).
    pub fn query(&self, sql: &str) -> Result<String, ChError> {
        self.post(&[("database", &self.database)], sql.as_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Runs one statement outside any database (`CREATE DATABASE`).
    pub fn query_server(&self, sql: &str) -> Result<String, ChError> {
        self.post(&[], sql.as_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Inserts RowBinary `rows` into `table (columns)`.
    pub fn insert(&self, table: &str, columns: &str, rows: &[u8]) -> Result<(), ChError> {
        let q = format!("INSERT INTO {table} ({columns}) FORMAT RowBinary");
        self.post(&[("database", &self.database), ("query", &q)], rows)
            .map(|_| ())
    }
}

/// RowBinary encoding of one row after another.
#[derive(Debug, Default, Clone)]
pub struct RowBinary {
    /// The encoded rows.
    pub buf: Vec<u8>,
    /// Rows encoded.
    pub rows: u64,
}

impl RowBinary {
    /// `UInt8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// `UInt16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// `UInt32` (and `DateTime`, seconds since the Unix epoch).
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// `UInt64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// `Int64`.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// `Float64`.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// `String`: LEB128 length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let mut n = v.len() as u64;
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.buf.push(b);
                break;
            }
            self.buf.push(b | 0x80);
        }
        self.buf.extend_from_slice(v);
        self
    }
    /// Ends a row.
    pub fn end_row(&mut self) {
        self.rows += 1;
    }
    /// Forgets every row.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.rows = 0;
    }
}

/// Splits a SQL file into statements: `--` comment lines dropped, statements end with `;`
/// at the end of a line.
pub fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        let t = line.trim();
        if t.starts_with("--") || t.is_empty() {
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if t.ends_with(';') {
            let s = cur.trim().trim_end_matches(';').trim().to_string();
            if !s.is_empty() {
                out.push(s);
            }
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rowbinary_by_hand() {
        let mut r = RowBinary::default();
        r.u8(1).u16(0x0203).u32(0x04050607).bytes(b"ab");
        r.end_row();
        assert_eq!(r.buf, [1, 3, 2, 7, 6, 5, 4, 2, b'a', b'b']);
        // 300 bytes: length 0xac 0x02 in LEB128.
        let mut r = RowBinary::default();
        r.bytes(&[0; 300]);
        assert_eq!(&r.buf[..2], &[0xac, 0x02]);
        assert_eq!(r.buf.len(), 302);
    }

    #[test]
    fn errors_are_classified_by_clickhouse_code() {
        let e = |status, code| ChError::Server {
            status,
            code,
            message: String::new(),
        };
        assert!(e(500, Some(193)).is_permanent()); // wrong password
        assert!(e(404, Some(60)).is_permanent()); // unknown table
        assert!(!e(500, Some(252)).is_permanent()); // too many parts: later
        assert!(!e(503, None).is_permanent());
        assert!(e(400, None).is_permanent());
        assert!(!ChError::Transport("refused".into()).is_permanent());
    }

    #[test]
    fn nothing_listening_is_a_transport_error() {
        let ch = ClickHouse::new("127.0.0.1:1", "dta", "u", "p", Duration::from_secs(1));
        match ch.query("SELECT 1") {
            Err(ChError::Transport(m)) => assert!(m.contains("127.0.0.1:1"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sql_files_split_into_statements() {
        let s = statements(
            "-- a comment\nCREATE TABLE a (x UInt8)\nENGINE = Log;\n\n-- b\nSELECT 1;\n",
        );
        assert_eq!(
            s,
            vec!["CREATE TABLE a (x UInt8)\nENGINE = Log", "SELECT 1"]
        );
        assert_eq!(url_encode("a b;é"), "a%20b%3B%C3%A9");
    }
}
