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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// The web settings every `dta` HTTP server takes (the collector's control API, the
/// translator's and the agent's metrics servers), as keys of the section that configures the
/// server (`[collector]`, `[translator]`, the agent's file): one definition, so the same keys
/// mean the same in all three.
///
/// ```toml
/// web_config_file = "/etc/dta/web.toml"          # TLS and basic_auth_users (WebConfig)
/// admin_token_file = "/etc/dta/admin.token"      # the admin bearer token (chmod 600)
/// control_hostnames = ["collector.example"]      # Host names answered besides IPs, localhost
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct WebSettings {
    /// A Prometheus-style web configuration ([`WebConfig`]: TLS, `basic_auth_users`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    /// A file holding the admin bearer token; others may not read or write it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// Host names answered besides IP literals and `localhost` (the `Host` header is checked
    /// against DNS rebinding).
    pub control_hostnames: Vec<String>,
}

impl WebSettings {
    /// The server options these settings describe (host policy, admin token, TLS, basic
    /// auth), for a server called `name`; the files are read and checked now, and an error
    /// names the key.
    pub fn server_options(&self, name: &str) -> Result<crate::ServerOptions, String> {
        let mut opts = crate::ServerOptions {
            name: name.to_string(),
            hosts: crate::HostPolicy::Checked(self.control_hostnames.clone()),
            ..Default::default()
        };
        if let Some(p) = &self.admin_token_file {
            opts.admin_token =
                Some(AdminToken::from_file(p).map_err(|e| format!("admin_token_file: {e}"))?);
        }
        if let Some(p) = &self.web_config_file {
            let w = WebConfig::load(p).map_err(|e| format!("web_config_file: {e}"))?;
            opts = opts
                .with_web_config(&w)
                .map_err(|e| format!("web_config_file {}: {e}", p.display()))?;
        }
        Ok(opts)
    }

    /// Whether anything is set (TLS, users or a token): the server then has something to
    /// protect.
    pub fn is_set(&self) -> bool {
        self.web_config_file.is_some() || self.admin_token_file.is_some()
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
/// Failed bcrypt checks remembered, and for how long: the same wrong password again is refused
/// without another check.
const FAIL_CACHE: usize = 4096;
/// How long a failed check is remembered.
const FAIL_TTL: Duration = Duration::from_secs(60);

/// `basic_auth_users`: users and their bcrypt hashes.
#[derive(Clone)]
pub struct BasicAuth {
    users: Arc<BTreeMap<String, String>>,
    /// SHA-256 of (user, password, hash) of checks that succeeded.
    cache: Arc<Mutex<HashSet<[u8; 32]>>>,
    /// The same of checks that failed, with when.
    failed: Arc<Mutex<HashMap<[u8; 32], Instant>>>,
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

/// Basic credentials as a request presented them, parsed (cheap) but not yet checked.
pub struct Credentials {
    user: String,
    pass: String,
    /// SHA-256 of (user, password, the user's hash): what the caches remember.
    key: [u8; 32],
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
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
            failed: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// Parses `Authorization: Basic ...` (cheap: no bcrypt).
    pub fn parse(&self, header: &str) -> Result<Credentials, AuthError> {
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
        let mut d = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [user, pass, hash.map_or("", |h| h.as_str())] {
            d.update(&(part.len() as u64).to_le_bytes());
            d.update(part.as_bytes());
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(d.finish().as_ref());
        Ok(Credentials {
            user: user.to_string(),
            pass: pass.to_string(),
            key,
        })
    }

    /// The answer for `c` if a check of the same credentials was remembered: a success, or a
    /// failure less than a minute old. Cheap; `None` means only [`BasicAuth::verify`] can say.
    pub fn cached(&self, c: &Credentials) -> Option<Result<String, AuthError>> {
        if self.users.contains_key(&c.user)
            && self.cache.lock().expect("auth cache").contains(&c.key)
        {
            return Some(Ok(c.user.clone()));
        }
        let failed = self.failed.lock().expect("auth cache");
        match failed.get(&c.key) {
            Some(at) if at.elapsed() < FAIL_TTL => {
                Some(Err(AuthError::Wrong("wrong user or password")))
            }
            _ => None,
        }
    }

    /// Checks `c` with bcrypt (slow by design: call it off the I/O thread) and remembers the
    /// outcome.
    pub fn verify(&self, c: &Credentials) -> Result<String, AuthError> {
        let hash = self.users.get(&c.user);
        let ok = bcrypt::verify(&c.pass, hash.map_or(DUMMY_HASH, |h| h.as_str())).unwrap_or(false);
        if !(ok && hash.is_some()) {
            let mut f = self.failed.lock().expect("auth cache");
            if f.len() >= FAIL_CACHE {
                f.retain(|_, at| at.elapsed() < FAIL_TTL);
                if f.len() >= FAIL_CACHE {
                    f.clear();
                }
            }
            f.insert(c.key, Instant::now());
            return Err(AuthError::Wrong("wrong user or password"));
        }
        let mut cache = self.cache.lock().expect("auth cache");
        if cache.len() >= AUTH_CACHE {
            cache.clear();
        }
        cache.insert(c.key);
        Ok(c.user.clone())
    }

    /// The user `Authorization: Basic ...` names, if its password is right. Slow (bcrypt) on
    /// the first success and on the first of each failure: call it off the I/O thread.
    pub fn check(&self, header: &str) -> Result<String, AuthError> {
        let c = self.parse(header)?;
        match self.cached(&c) {
            Some(r) => r,
            None => self.verify(&c),
        }
    }
}

/// Failed or uncached basic-auth checks a peer may start at once ([`AuthThrottle`]).
pub const THROTTLE_BURST: u32 = 5;
/// How often a peer earns another check once its burst is spent.
pub const THROTTLE_REFILL: Duration = Duration::from_secs(1);
/// Peers (IPv4 addresses, IPv6 /64 prefixes) an [`AuthThrottle`] keeps track of.
pub const THROTTLE_PEERS: usize = 4096;

/// Bounds the bcrypt checks each peer can cause, so a flood of wrong passwords costs the
/// server little CPU and never takes the handler threads from other callers.
///
/// Every check that is not answered from [`BasicAuth::cached`] takes a token of its peer's
/// bucket ([`THROTTLE_BURST`] tokens, one back every [`THROTTLE_REFILL`]; a success gives its
/// token back), and a peer runs one check at a time. A peer without a token, or with a check
/// running, is answered 429 at once. Peers are IPv4 addresses and IPv6 /64 prefixes (one
/// host's share of a network), at most [`THROTTLE_PEERS`]: when the table is full, peers
/// whose buckets are full and idle are forgotten; a new peer finding no room is answered 429.
#[derive(Debug, Default)]
pub struct AuthThrottle {
    peers: Mutex<HashMap<IpAddr, PeerBucket>>,
}

#[derive(Debug, Clone, Copy)]
struct PeerBucket {
    /// Tokens as of `at`.
    tokens: u32,
    at: Instant,
    busy: bool,
}

impl PeerBucket {
    fn refill(&mut self, now: Instant) {
        let earned =
            now.saturating_duration_since(self.at).as_millis() / THROTTLE_REFILL.as_millis().max(1);
        if earned > 0 {
            self.tokens = (self.tokens as u128 + earned).min(THROTTLE_BURST as u128) as u32;
            self.at = now;
        }
        if self.tokens == THROTTLE_BURST {
            self.at = now;
        }
    }
}

/// The peer a check is counted against: the address, or an IPv6 address's /64.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl AuthThrottle {
    /// Admits one check for `peer` at `now` (taking a token and the peer's one slot), or says
    /// no. Every admission must be followed by [`AuthThrottle::finish`].
    pub fn admit(&self, peer: IpAddr, now: Instant) -> bool {
        let key = peer_key(peer);
        let mut m = self.peers.lock().expect("auth throttle");
        if !m.contains_key(&key) && m.len() >= THROTTLE_PEERS {
            m.retain(|_, b| {
                b.refill(now);
                b.busy || b.tokens < THROTTLE_BURST
            });
            if m.len() >= THROTTLE_PEERS {
                return false;
            }
        }
        let b = m.entry(key).or_insert(PeerBucket {
            tokens: THROTTLE_BURST,
            at: now,
            busy: false,
        });
        b.refill(now);
        if b.busy || b.tokens == 0 {
            return false;
        }
        b.tokens -= 1;
        b.busy = true;
        true
    }

    /// Ends an admitted check; a success gives its token back.
    pub fn finish(&self, peer: IpAddr, succeeded: bool) {
        let mut m = self.peers.lock().expect("auth throttle");
        if let Some(b) = m.get_mut(&peer_key(peer)) {
            b.busy = false;
            if succeeded {
                b.tokens = (b.tokens + 1).min(THROTTLE_BURST);
            }
        }
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
    fn failed_checks_are_remembered_and_cached_answers_need_no_bcrypt() {
        let h = bcrypt::hash("s3cret", 4).unwrap();
        let a = BasicAuth::new([("prom".to_string(), h)].into()).unwrap();
        let wrong = a.parse(&basic("prom", "nope")).unwrap();
        assert!(a.cached(&wrong).is_none(), "never checked");
        assert!(matches!(a.verify(&wrong), Err(AuthError::Wrong(_))));
        assert!(matches!(a.cached(&wrong), Some(Err(AuthError::Wrong(_)))));
        let right = a.parse(&basic("prom", "s3cret")).unwrap();
        assert!(a.cached(&right).is_none());
        assert_eq!(a.verify(&right), Ok("prom".into()));
        assert_eq!(a.cached(&right), Some(Ok("prom".into())));
        // The password never shows in a Debug print.
        assert!(!format!("{right:?}").contains("s3cret"));
    }

    #[test]
    fn the_throttle_bounds_checks_per_peer() {
        let t = AuthThrottle::default();
        let p: IpAddr = "192.0.2.7".parse().unwrap();
        let q: IpAddr = "192.0.2.8".parse().unwrap();
        let t0 = Instant::now();
        // One at a time.
        assert!(t.admit(p, t0));
        assert!(!t.admit(p, t0), "a second check while one runs");
        assert!(t.admit(q, t0), "another peer is not affected");
        t.finish(q, true);
        t.finish(p, false);
        // The burst, then nothing until a token comes back.
        for _ in 1..THROTTLE_BURST {
            assert!(t.admit(p, t0));
            t.finish(p, false);
        }
        assert!(!t.admit(p, t0), "burst spent");
        assert!(!t.admit(p, t0 + THROTTLE_REFILL / 2));
        assert!(t.admit(p, t0 + THROTTLE_REFILL));
        t.finish(p, true);
        assert!(
            t.admit(p, t0 + THROTTLE_REFILL),
            "a success gives its token back"
        );
        t.finish(p, false);
        // An IPv6 host is one peer per /64, whatever its interface ID.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        for i in 0..THROTTLE_BURST {
            assert!(t.admit(v6(&format!("2001:db8:1:2::{i:x}")), t0));
            t.finish(v6(&format!("2001:db8:1:2::{i:x}")), false);
        }
        assert!(!t.admit(v6("2001:db8:1:2:ffff::1"), t0));
        assert!(t.admit(v6("2001:db8:1:3::1"), t0));
        // A full table forgets idle, full buckets first; with none, new peers wait.
        let t = AuthThrottle::default();
        for i in 0..THROTTLE_PEERS as u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(t.admit(ip, t0));
        }
        assert!(!t.admit(v6("198.51.100.1"), t0), "every bucket busy");
        for i in 0..10u32 {
            t.finish(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)), true);
        }
        assert!(
            t.admit(v6("198.51.100.1"), t0),
            "idle full buckets make room"
        );
    }

    #[test]
    fn web_settings_make_server_options_and_errors_name_the_key() {
        let w = WebSettings {
            control_hostnames: vec!["m.example".into()],
            ..WebSettings::default()
        };
        let o = w.server_options("x").unwrap();
        assert_eq!(
            o.hosts,
            crate::HostPolicy::Checked(vec!["m.example".into()])
        );
        assert!(o.tls.is_none() && o.basic_auth.is_none() && o.admin_token.is_none());
        let w = WebSettings {
            web_config_file: Some("/nonexistent/web.toml".into()),
            ..WebSettings::default()
        };
        let e = w.server_options("x").err().unwrap();
        assert!(e.starts_with("web_config_file:"), "{e}");
        let w = WebSettings {
            admin_token_file: Some("/nonexistent/token".into()),
            ..WebSettings::default()
        };
        let e = w.server_options("x").err().unwrap();
        assert!(e.starts_with("admin_token_file:"), "{e}");
        // As keys of a section with keys of its own, unknown ones still refused.
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Section {
            #[allow(dead_code)]
            listen: String,
            #[serde(flatten)]
            web: WebSettings,
        }
        let s: Section = toml::from_str(
            "listen = \"a\"\nweb_config_file = \"/w\"\ncontrol_hostnames = [\"h\"]\n",
        )
        .unwrap();
        assert_eq!(s.web.web_config_file, Some(PathBuf::from("/w")));
        let e = toml::from_str::<Section>("listen = \"a\"\nweb_config = \"/w\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `web_config`"), "{e}");
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
