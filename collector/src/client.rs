//! Where the control API is and how to talk to it (the CLI's `query`, `tail`, `stats` and
//! `epoch` subcommands, the cluster gateway, the exporter and the tests): an [`Endpoint`]
//! holds the address, TLS settings, credentials and limits, and sends each request through
//! the one HTTP client, `dta_http::client::send` (one request per connection; what it reads
//! and how long it waits are bounded by [`Endpoint::limits`]). This module owns the control
//! API's request conventions (the bulk body's content type, bearer or basic credentials) and
//! its error wording; it speaks no HTTP itself.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use dta_http::client::{ClientLimits, ClientRequest, ClientTls};

/// How long one request to the control API may take, all told.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer body taken (a bulk query of 100,000 keys answers about 15 MB).
pub const MAX_BODY: usize = 64 << 20;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where the control API is and how to talk to it.
#[derive(Clone)]
pub struct Endpoint {
    /// `ip:port` (or `host:port`).
    pub addr: String,
    /// Speak TLS (the collector has a `[tls_server_config]`).
    pub tls: Option<ClientTls>,
    /// The admin bearer token (sent on every request: it also satisfies basic auth).
    pub token: Option<String>,
    /// Basic-auth user and password.
    pub basic: Option<(String, String)>,
    /// What one request may take: [`TIMEOUT`] all told, 64 KiB of header, [`MAX_BODY`].
    pub limits: ClientLimits,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token or the password.
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("basic", &self.basic.as_ref().map(|(u, _)| u))
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for Endpoint {
    fn default() -> Endpoint {
        Endpoint {
            addr: String::new(),
            tls: None,
            token: None,
            basic: None,
            limits: ClientLimits {
                timeout: TIMEOUT,
                max_body_bytes: MAX_BODY,
                ..ClientLimits::default()
            },
        }
    }
}

impl Endpoint {
    /// Plain HTTP, no credentials.
    pub fn plain(addr: &str) -> Endpoint {
        Endpoint {
            addr: addr.to_string(),
            ..Endpoint::default()
        }
    }

    /// Trusts the certificates in `ca_file` (a CA, or the collector's own certificate) for
    /// TLS, checking the host part of the address against the certificate.
    pub fn with_tls(mut self, ca_file: &Path) -> Result<Endpoint, String> {
        let host = self
            .addr
            .rsplit_once(':')
            .map_or(self.addr.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        self.tls = Some(ClientTls {
            config: dta_http::tls::client_config(ca_file)?,
            server_name: host,
        });
        Ok(self)
    }

    /// Sends `method path` and reads the whole answer.
    pub fn request(&self, method: &str, path: &str) -> Result<Response, String> {
        self.request_with_body(method, path, b"")
    }

    /// Sends `method path` with `body` (a bulk query's keys) and reads the whole answer.
    pub fn request_with_body(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Response, String> {
        let addr = &self.addr;
        let unreachable = |e: &dyn std::fmt::Display| {
            format!(
                "cannot reach the collector's control API at {addr}: {e} (is `dta-collector \
                 run` running with [collector] control = \"{addr}\"? pass --control ADDR or -c \
                 FILE)"
            )
        };
        let mut req = ClientRequest::new(method, path, body);
        if !body.is_empty() {
            // Not text/plain: the server refuses the bodies a page on another site could send.
            let json = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
            req = req.header(
                "Content-Type",
                if json {
                    "application/json"
                } else {
                    "application/x-dta-keys"
                },
            );
        }
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        } else if let Some((u, p)) = &self.basic {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            req = req.header("Authorization", format!("Basic {b}"));
        }
        let a = dta_http::client::send(addr, self.tls.as_ref(), &req, &self.limits).map_err(
            |e| match e.kind() {
                std::io::ErrorKind::InvalidData => format!("{addr}: {e}"),
                std::io::ErrorKind::TimedOut => format!(
                    "{addr}: no complete answer within {:?}",
                    self.limits.timeout
                ),
                _ => unreachable(&e),
            },
        )?;
        Ok(Response {
            status: a.status,
            headers: a.headers,
            body: String::from_utf8_lossy(&a.body).into_owned(),
        })
    }
}

/// Sends `method path` to the collector at `addr` (plain HTTP, no credentials) and reads the
/// whole answer.
pub fn request(addr: &str, method: &str, path: &str) -> Result<Response, String> {
    Endpoint::plain(addr).request(method, path)
}

/// Sends `method path` with `body` to the collector at `addr` (plain HTTP, no credentials).
pub fn request_with_body(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Response, String> {
    Endpoint::plain(addr).request_with_body(method, path, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_collector_is_a_clear_error() {
        // Port 1 on localhost: nothing listens there.
        let e = request("127.0.0.1:1", "GET", "/stats").unwrap_err();
        assert!(e.contains("cannot reach the collector"), "{e}");
    }
}
