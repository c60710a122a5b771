//! Who is calling: Prometheus-style basic auth, the admin bearer token, and the web
//! configuration file that sets them up.
//!
//! Two kinds of credentials, for two kinds of callers:
//! - `basic_auth_users` (web configuration, bcrypt hashes, as in Prometheus'
//!   exporter-toolkit): when set, *every* request needs one of them ([`Access::User`]).
//!   Browsers cache these and send them on their own, so they never grant admin rights.
//! - The admin bearer token (`Authorization: Bearer <token>`, read from a file that others
//!   may not read): grants [`Access::Admin`] and, being admin, everything a user may do.
//!   Browsers never attach it by themselves, so a cross-site request cannot carry it.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde::Deserialize;

/// What a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No credentials (only possible when no `basic_auth_users` are configured).
    Anonymous,
    /// A `basic_auth_users` user: read-only endpoints.
    User(String),
    /// The admin bearer token: everything.
    Admin,
}

impl Access {
    /// Whether the caller presented the admin token.
    pub fn is_admin(&self) -> bool {
        matches!(self, Access::Admin)
    }
}

/// A web configuration file, as Prometheus exporters take with `--web.config.file`, in TOML:
///
/// ```toml
/// [tls_server_config]
/// cert_file = "server.crt"     # PEM, the chain; relative to this file's directory
/// key_file = "server.key"      # PEM, PKCS#8, PKCS#1 or SEC1
///
/// [basic_auth_users]
/// prometheus = "$2y$10$..."    # bcrypt (htpasswd -nBC 10 prometheus)
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Serve HTTPS.
    #[serde(default)]
    pub tls_server_config: Option<TlsServerConfig>,
    /// Users and their bcrypt hashes; when not empty, every request must authenticate.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

/// `[tls_server_config]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// Certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Private key (PEM).
    pub key_file: PathBuf,
}

impl WebConfig {
    /// Reads a web configuration; relative paths in it are taken relative to its directory.
    pub fn load(path: &Path) -> Result<WebConfig, String> {
        let s = std::fs::read_to_string(path)
            .map_err(|e| format!("web config {}: {e}", path.display()))?;
        let mut w: WebConfig =
            toml::from_str(&s).map_err(|e| format!("web config {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        if let Some(t) = &mut w.tls_server_config {
            for p in [&mut t.cert_file, &mut t.key_file] {
                if p.is_relative() {
                    *p = dir.join(&*p);
                }
            }
        }
        // Check the hashes now, so a typo is a start-up error and not a locked-out operator.
        BasicAuth::new(w.basic_auth_users.clone())
            .map_err(|e| format!("web config {}: {e}", path.display()))?;
        Ok(w)
    }
}

/// Shortest admin token accepted (bytes).
pub const MIN_TOKEN_LEN: usize = 16;

/// The admin bearer token.
#[derive(Clone)]
pub struct AdminToken(Arc<[u8]>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// A token given directly (tests, embedding); at least [`MIN_TOKEN_LEN`] visible ASCII
    /// characters.
    pub fn new(token: &str) -> Result<AdminToken, String> {
        let t = token.trim();
        if t.len() < MIN_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the admin token must be at least {MIN_TOKEN_LEN} visible ASCII characters \
                 (e.g. `head -c 32 /dev/urandom | base64`)"
            ));
        }
        Ok(AdminToken(t.as_bytes().into()))
    }

    /// Reads the token from `path`, which must be a regular file that others (neither its
    /// owner nor its group) can neither read nor write: a token everyone on the host can read
    /// protects nothing.
    pub fn from_file(path: &Path) -> Result<AdminToken, String> {
        use std::os::unix::fs::PermissionsExt as _;
        let what = |e: &dyn std::fmt::Display| format!("admin token file {}: {e}", path.display());
        let md = std::fs::metadata(path).map_err(|e| what(&e))?;
        if !md.is_file() {
            return Err(what(&"not a regular file"));
        }
        let mode = md.permissions().mode();
        if mode & 0o006 != 0 {
            return Err(what(&format_args!(
                "mode {:03o} lets other users read or write it; chmod 600 (or 640) it",
                mode & 0o777
            )));
        }
        let s = std::fs::read_to_string(path).map_err(|e| what(&e))?;
        AdminToken::new(&s).map_err(|e| what(&e))
    }

    /// The token, for a client to send.
    pub fn as_str(&self) -> &str {
        // Built from a &str in `new`.
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// Whether `presented` is the token (in time independent of where they differ).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let t = &self.0;
        if presented.len() != t.len() {
            return false;
        }
        presented
            .iter()
            .zip(t.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// Successful bcrypt checks remembered (a check costs tens of milliseconds by design, and a
/// scraper sends the same credentials every few seconds).
const AUTH_CACHE: usize = 1024;

/// `basic_auth_users`: users and their bcrypt hashes.
#[derive(Clone)]
pub struct BasicAuth {
    users: Arc<BTreeMap<String, String>>,
    /// SHA-256 of (user, password, hash) of checks that succeeded.
    cache: Arc<Mutex<HashSet<[u8; 32]>>>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A bcrypt hash checked for unknown users, so that they take as long as known ones.
const DUMMY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// Basic auth is required and the request has none (or another scheme).
    Missing,
    /// Credentials were given and are wrong (or malformed).
    Wrong(&'static str),
}

impl BasicAuth {
    /// Users with bcrypt hashes (`$2a$`, `$2b$`, `$2x$`, `$2y$`); an invalid hash is an error.
    pub fn new(users: BTreeMap<String, String>) -> Result<BasicAuth, String> {
        for (name, h) in &users {
            if name.contains(':') {
                return Err(format!("basic_auth_users: user {name:?} contains ':'"));
            }
            h.parse::<bcrypt::HashParts>().map_err(|e| {
                format!("basic_auth_users: {name:?} has no valid bcrypt hash ({e})")
            })?;
        }
        Ok(BasicAuth {
            users: Arc::new(users),
            cache: Arc::new(Mutex::new(HashSet::new())),
        })
    }

    /// The user `Authorization: Basic ...` names, if its password is right. Slow (bcrypt) on
    /// the first success and on every failure: call it off the I/O thread.
    pub fn check(&self, header: &str) -> Result<String, AuthError> {
        let Some(b64) = strip_scheme(header, "basic") else {
            return Err(AuthError::Missing);
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| AuthError::Wrong("malformed basic credentials"))?;
        let raw =
            String::from_utf8(raw).map_err(|_| AuthError::Wrong("malformed basic credentials"))?;
        let (user, pass) = raw
            .split_once(':')
            .ok_or(AuthError::Wrong("malformed basic credentials"))?;
        let hash = self.users.get(user);
        let key = {
            let mut d = ring::digest::Context::new(&ring::digest::SHA256);
            for part in [user, pass, hash.map_or("", |h| h.as_str())] {
                d.update(&(part.len() as u64).to_le_bytes());
                d.update(part.as_bytes());
            }
            let mut k = [0u8; 32];
            k.copy_from_slice(d.finish().as_ref());
            k
        };
        if hash.is_some() && self.cache.lock().expect("auth cache").contains(&key) {
            return Ok(user.to_string());
        }
        let ok = bcrypt::verify(pass, hash.map_or(DUMMY_HASH, |h| h.as_str())).unwrap_or(false);
        if !(ok && hash.is_some()) {
            return Err(AuthError::Wrong("wrong user or password"));
        }
        let mut c = self.cache.lock().expect("auth cache");
        if c.len() >= AUTH_CACHE {
            c.clear();
        }
        c.insert(key);
        Ok(user.to_string())
    }
}

/// `rest` of `"<scheme> rest"` if the scheme matches (case-insensitively).
pub(crate) fn strip_scheme<'a>(header: &'a str, scheme: &str) -> Option<&'a str> {
    let (s, rest) = header.trim_start().split_once(' ')?;
    s.eq_ignore_ascii_case(scheme).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn basic(user: &str, pass: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    }

    #[test]
    fn basic_auth_checks_bcrypt_hashes() {
        let h = bcrypt::hash("s3cret", 4).unwrap();
        let a = BasicAuth::new([("prom".to_string(), h)].into()).unwrap();
        assert_eq!(a.check(&basic("prom", "s3cret")), Ok("prom".into()));
        // The cached path gives the same answer.
        assert_eq!(a.check(&basic("prom", "s3cret")), Ok("prom".into()));
        assert!(matches!(
            a.check(&basic("prom", "nope")),
            Err(AuthError::Wrong(_))
        ));
        assert!(matches!(
            a.check(&basic("eve", "s3cret")),
            Err(AuthError::Wrong(_))
        ));
        assert!(matches!(a.check("Basic %%%"), Err(AuthError::Wrong(_))));
        assert_eq!(a.check("Bearer abc"), Err(AuthError::Missing));
        assert!(BasicAuth::new([("x".to_string(), "plain".to_string())].into()).is_err());
        // The dummy hash is a valid one (unknown users really pay for a check).
        assert!(DUMMY_HASH.parse::<bcrypt::HashParts>().is_ok());
    }

    #[test]
    fn admin_token_file_must_be_private() {
        let dir = std::env::temp_dir().join(format!("dta-http-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "0123456789abcdefXYZ\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = AdminToken::from_file(&f).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = AdminToken::from_file(&f).unwrap();
        assert!(t.matches(b"0123456789abcdefXYZ"));
        assert!(!t.matches(b"0123456789abcdefXYz"));
        assert!(!t.matches(b"0123456789abcdef"));
        std::fs::write(&f, "short").unwrap();
        assert!(AdminToken::from_file(&f).is_err());
        assert!(AdminToken::from_file(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn web_config_resolves_paths_and_refuses_unknown_keys() {
        let dir = std::env::temp_dir().join(format!("dta-http-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("web.toml");
        let h = bcrypt::hash("pw", 4).unwrap();
        std::fs::write(
            &f,
            format!(
                "[tls_server_config]\ncert_file = \"c.pem\"\nkey_file = \"/k.pem\"\n\
                 [basic_auth_users]\nalice = \"{h}\"\n"
            ),
        )
        .unwrap();
        let w = WebConfig::load(&f).unwrap();
        let t = w.tls_server_config.unwrap();
        assert_eq!(t.cert_file, dir.join("c.pem"));
        assert_eq!(t.key_file, Path::new("/k.pem"));
        assert_eq!(w.basic_auth_users.len(), 1);
        std::fs::write(&f, "[tls_server_config]\ncert = \"x\"\n").unwrap();
        assert!(WebConfig::load(&f).is_err());
        std::fs::write(&f, "[basic_auth_users]\nbob = \"not-bcrypt\"\n").unwrap();
        assert!(WebConfig::load(&f).unwrap_err().contains("bcrypt"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
