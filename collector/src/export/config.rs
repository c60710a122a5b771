//! `[export.clickhouse]`: the exporter's part of the collector's configuration.
//!
//! ```toml
//! [export.clickhouse]
//! url = "http://127.0.0.1:8123"      # ClickHouse's HTTP interface; https://host:8443 for TLS
//! # ca_file = "/etc/dta/clickhouse-ca.pem"   # https: the CA (or certificate) trusted; default:
//! #                                  # the system's bundle, /etc/ssl/certs/ca-certificates.crt
//! database = "dta"                   # created with the tables when create_tables = true
//! user = "dta"
//! password_file = "/etc/dta/clickhouse.password"   # the password, one line; never inline
//! state_file = "/var/lib/dta/clickhouse-export.json"  # the durable cursor
//! batch_rows = 100000                # most rows per INSERT (1..=1000000)
//! interval_ms = 1000                 # how often the Append lists are polled
//! snapshot_secs = 60                 # snapshots every this many seconds (0: none)
//! metrics = "127.0.0.1:9466"         # the exporter's own /metrics
//!
//! [[export.clickhouse.keys]]         # the active keys snapshotted from a store
//! store = "counts"
//! file = "/etc/dta/active-flows.txt" # one key per line (hex or 5-tuple), re-read each time
//! ```

use std::net::SocketAddrV4;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::CollectorConfig;
use dta_proto::meta::StoreKind;

/// `[export]`: the history exporters (`dta-collector export`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSection {
    /// `[export.clickhouse]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clickhouse: Option<ClickHouseExport>,
}

/// The certificates an https `url` is checked against when no `ca_file` is given: Debian's
/// bundle of the system's trusted CAs (package `ca-certificates`).
pub const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// `[export.clickhouse]`: where and how the exporter writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseExport {
    /// ClickHouse's HTTP interface, `http://host:port` (port 8123 by default) or
    /// `https://host:port` (port 8443 by default; the server's certificate is verified).
    pub url: String,
    /// With an https `url`: the PEM certificates trusted to sign ClickHouse's certificate (a
    /// CA, or the server's own self-signed certificate). Absent: [`SYSTEM_CA_FILE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The database holding the tables.
    #[serde(default = "default_database")]
    pub database: String,
    /// The ClickHouse user.
    #[serde(default = "default_user")]
    pub user: String,
    /// A file holding the user's password (trailing newline ignored). Absent: no password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// The durable cursor: written atomically after every insert ClickHouse acknowledged.
    pub state_file: PathBuf,
    /// Most rows per INSERT.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: u32,
    /// Milliseconds between polls of the Append lists.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// Seconds between snapshots of counters, Key-Write answers and sketches (0: none).
    #[serde(default = "default_snapshot_secs")]
    pub snapshot_secs: u64,
    /// Create the database and the tables (`collector/clickhouse/schema.sql`) at start.
    #[serde(default = "default_true")]
    pub create_tables: bool,
    /// The Append stores exported (absent: every sequenced Append store).
    #[serde(default)]
    pub append_stores: Option<Vec<String>>,
    /// Where the exporter serves its own `/metrics` (absent: nowhere).
    #[serde(default)]
    pub metrics: Option<SocketAddrV4>,
    /// Seconds one request to ClickHouse may take.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// The longest wait between retries, in milliseconds (waits double from 100 ms).
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// The active keys of Key-Increment, Key-Write and Sketch stores.
    #[serde(default)]
    pub keys: Vec<KeySet>,
}

/// `[[export.clickhouse.keys]]`: a store and the file listing the keys snapshotted from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySet {
    /// A Key-Increment, Key-Write or Count-Min / Count sketch store.
    pub store: String,
    /// One key per line (hex or 5-tuple; blank lines and `#` comments skipped), re-read at
    /// every snapshot so the set can change while the exporter runs.
    pub file: PathBuf,
}

/// Most rows one INSERT may carry: below ClickHouse's `max_insert_block_size` (1,048,576), so
/// every INSERT is one block, written as one part, all or nothing.
pub const MAX_BATCH_ROWS: u32 = 1_000_000;

fn default_database() -> String {
    "dta".into()
}
fn default_user() -> String {
    "default".into()
}
fn default_batch_rows() -> u32 {
    100_000
}
fn default_interval_ms() -> u64 {
    1000
}
fn default_snapshot_secs() -> u64 {
    60
}
fn default_true() -> bool {
    true
}
fn default_timeout_secs() -> u64 {
    10
}
fn default_max_backoff_ms() -> u64 {
    30_000
}

/// Where ClickHouse is, from `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickHouseUrl {
    /// https.
    pub tls: bool,
    /// The host (name or address literal, without brackets): what the certificate must name.
    pub host: String,
    /// `host:port` to connect to.
    pub host_port: String,
}

impl ClickHouseExport {
    /// Scheme, host and port of `url`, or what is wrong with it.
    pub fn parse_url(&self) -> Result<ClickHouseUrl, String> {
        let at = "[export.clickhouse] url";
        let (tls, rest) = match (
            self.url.strip_prefix("https://"),
            self.url.strip_prefix("http://"),
        ) {
            (Some(r), _) => (true, r),
            (None, Some(r)) => (false, r),
            (None, None) => {
                return Err(format!(
                    "{at}: {:?} must start with http:// or https:// (e.g. http://127.0.0.1:8123)",
                    self.url
                ))
            }
        };
        let hp = rest.trim_end_matches('/');
        if hp.is_empty() || hp.contains('/') || hp.contains('?') || hp.contains('@') {
            return Err(format!(
                "{at}: {:?}: give only scheme, host and port (the user and database have keys \
                 of their own)",
                self.url
            ));
        }
        let (host, port) = match hp.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && p.parse::<u16>().is_ok() => (h, Some(p)),
            _ => (hp, None),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(format!("{at}: {:?} names no host", self.url));
        }
        let host_port = match port {
            Some(_) => hp.to_string(),
            None => format!("{hp}:{}", if tls { 8443 } else { 8123 }),
        };
        Ok(ClickHouseUrl {
            tls,
            host,
            host_port,
        })
    }

    /// `host:port` of `url`, or what is wrong with it.
    pub fn host_port(&self) -> Result<String, String> {
        self.parse_url().map(|u| u.host_port)
    }

    /// The TLS settings for an https `url` (`None` for http): trusting `ca_file`, or the
    /// system's CAs, and nothing else.
    pub fn tls(&self) -> Result<Option<dta_http::client::ClientTls>, String> {
        let u = self.parse_url()?;
        if !u.tls {
            return Ok(None);
        }
        let ca = self
            .ca_file
            .clone()
            .unwrap_or_else(|| PathBuf::from(SYSTEM_CA_FILE));
        let config = dta_http::tls::client_config(&ca).map_err(|e| {
            format!("[export.clickhouse] ca_file: {e} (the certificates an https url is checked against)")
        })?;
        Ok(Some(dta_http::client::ClientTls {
            config,
            server_name: u.host,
        }))
    }

    /// The password from `password_file` (empty without one).
    pub fn password(&self) -> Result<String, String> {
        let Some(p) = &self.password_file else {
            return Ok(String::new());
        };
        let s = std::fs::read_to_string(p)
            .map_err(|e| format!("[export.clickhouse] password_file {}: {e}", p.display()))?;
        let pw = s.trim_end_matches(['\n', '\r']);
        if pw.contains('\n') {
            return Err(format!(
                "[export.clickhouse] password_file {}: more than one line",
                p.display()
            ));
        }
        Ok(pw.to_string())
    }
}

fn identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

/// Checks `[export.clickhouse]` against the rest of the configuration.
pub fn validate(cfg: &CollectorConfig) -> Result<(), String> {
    let Some(c) = &cfg.export.clickhouse else {
        return Ok(());
    };
    let at = "[export.clickhouse]";
    if !c.parse_url()?.tls && c.ca_file.is_some() {
        return Err(format!(
            "{at} ca_file: only an https url is checked against certificates; use https:// \
             or remove ca_file"
        ));
    }
    if !identifier(&c.database) {
        return Err(format!(
            "{at} database: {:?}: letters, digits and _ only (it is spliced into SQL)",
            c.database
        ));
    }
    if c.user.is_empty() || c.user.contains(['\n', '\r', ':']) {
        return Err(format!("{at} user: {:?} is not a user name", c.user));
    }
    if !(1..=MAX_BATCH_ROWS).contains(&c.batch_rows) {
        return Err(format!(
            "{at} batch_rows: {} must be 1..={MAX_BATCH_ROWS} (one INSERT is one ClickHouse \
             block, so that it lands all or nothing)",
            c.batch_rows
        ));
    }
    if !(10..=3_600_000).contains(&c.interval_ms) {
        return Err(format!(
            "{at} interval_ms: {} must be 10..=3600000",
            c.interval_ms
        ));
    }
    if c.timeout_secs == 0 || c.timeout_secs > 3600 {
        return Err(format!(
            "{at} timeout_secs: {} must be 1..=3600",
            c.timeout_secs
        ));
    }
    if c.max_backoff_ms < 100 {
        return Err(format!(
            "{at} max_backoff_ms: {} must be at least 100",
            c.max_backoff_ms
        ));
    }
    if cfg.collector.control.is_none() {
        return Err(format!(
            "{at} needs [collector] control: the exporter reads the collector through its \
             control API"
        ));
    }
    let store = |name: &str| cfg.stores.iter().find(|s| s.name == name);
    for name in c.append_stores.iter().flatten() {
        match store(name).map(|s| s.kind.layout()) {
            Some(StoreKind::Append { format, .. })
                if *format == dta_proto::layout::AppendFormat::Sequenced => {}
            Some(StoreKind::Append { .. }) => {
                return Err(format!(
                    "{at} append_stores: {name:?} has the reference format, whose entries carry \
                     no sequence number: it cannot be exported exactly once"
                ))
            }
            Some(_) => {
                return Err(format!(
                    "{at} append_stores: {name:?} is not an Append store"
                ))
            }
            None => return Err(format!("{at} append_stores: no store called {name:?}")),
        }
    }
    for k in &c.keys {
        match store(&k.store).map(|s| s.kind.layout()) {
            Some(StoreKind::KeyIncrement { .. } | StoreKind::KeyWrite { .. }) => {}
            Some(StoreKind::Sketch { sketch, .. })
                if *sketch != dta_proto::sketch::SketchKind::HyperLogLog => {}
            Some(_) => {
                return Err(format!(
                    "{at} keys: store {:?} has no point queries (keys are for Key-Increment, \
                     Key-Write and Count-Min / Count sketch stores)",
                    k.store
                ))
            }
            None => return Err(format!("{at} keys: no store called {:?}", k.store)),
        }
        if c.keys.iter().filter(|o| o.store == k.store).count() > 1 {
            return Err(format!(
                "{at} keys: store {:?} has two key sets; list every key in one file",
                k.store
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[collector]
hugepages = false
control = "127.0.0.1:0"
[[store]]
name = "ki"
kind = "keyincrement"
slots = 16
[[store]]
name = "ap"
kind = "append"
lists = 2
capacity = 4
batch = 2
[[store]]
name = "ref"
kind = "append"
lists = 1
first_list = 2
capacity = 4
batch = 2
format = "reference"
"#;

    fn parse(export: &str) -> Result<CollectorConfig, String> {
        CollectorConfig::from_toml(&format!("{BASE}\n[export.clickhouse]\n{export}"))
    }

    #[test]
    fn defaults_and_a_full_section() {
        let c = parse("url = \"http://127.0.0.1:8123\"\nstate_file = \"/tmp/x.json\"").unwrap();
        let ch = c.export.clickhouse.unwrap();
        assert_eq!((ch.database.as_str(), ch.batch_rows), ("dta", 100_000));
        assert_eq!(ch.host_port().unwrap(), "127.0.0.1:8123");
        let c = parse(
            "url = \"http://db.example/\"\nstate_file = \"/tmp/x\"\nappend_stores = [\"ap\"]\n\
             [[export.clickhouse.keys]]\nstore = \"ki\"\nfile = \"/tmp/k\"",
        )
        .unwrap();
        let ch = c.export.clickhouse.unwrap();
        assert_eq!(ch.host_port().unwrap(), "db.example:8123");
        assert_eq!(ch.keys.len(), 1);
        // https: port 8443 unless given; the host is what the certificate must name.
        let c = parse("url = \"https://db.example\"\nstate_file = \"/tmp/x\"").unwrap();
        let u = c.export.clickhouse.unwrap().parse_url().unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.host_port.as_str()),
            (true, "db.example", "db.example:8443")
        );
        let c = parse("url = \"https://[::1]:9443\"\nstate_file = \"/tmp/x\"\nca_file = \"/c\"")
            .unwrap();
        let ch = c.export.clickhouse.unwrap();
        let u = ch.parse_url().unwrap();
        assert_eq!(
            (u.host.as_str(), u.host_port.as_str()),
            ("::1", "[::1]:9443")
        );
        assert!(
            ch.tls().unwrap_err().contains("ca_file"),
            "a missing ca_file"
        );
        // A configuration without the section has none.
        assert!(CollectorConfig::from_toml(BASE)
            .unwrap()
            .export
            .clickhouse
            .is_none());
    }

    #[test]
    fn wrong_settings_name_the_key() {
        let sf = "state_file = \"/tmp/x\"\n";
        for (bad, want) in [
            ("url = \"127.0.0.1:8123\"", "must start with http://"),
            ("url = \"http://h\"\nca_file = \"/ca.pem\"", "ca_file"),
            ("url = \"http://u:p@h:8123\"", "give only scheme"),
            ("url = \"http://h\"\ndatabase = \"a;drop\"", "database"),
            ("url = \"http://h\"\nbatch_rows = 0", "batch_rows"),
            ("url = \"http://h\"\nbatch_rows = 2000000", "batch_rows"),
            ("url = \"http://h\"\ninterval_ms = 1", "interval_ms"),
            (
                "url = \"http://h\"\nappend_stores = [\"ki\"]",
                "not an Append store",
            ),
            (
                "url = \"http://h\"\nappend_stores = [\"ref\"]",
                "reference format",
            ),
            (
                "url = \"http://h\"\nappend_stores = [\"zz\"]",
                "no store called",
            ),
            (
                "url = \"http://h\"\n[[export.clickhouse.keys]]\nstore = \"ap\"\nfile = \"k\"",
                "no point queries",
            ),
            (
                "url = \"http://h\"\npassword = \"x\"",
                "unknown field `password`",
            ),
        ] {
            let e = parse(&format!("{sf}{bad}")).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        let e = parse("url = \"http://h\"").unwrap_err();
        assert!(e.contains("state_file"), "{e}");
        let no_control = BASE.replace("control = \"127.0.0.1:0\"\n", "");
        let e = CollectorConfig::from_toml(&format!(
            "{no_control}\n[export.clickhouse]\nurl = \"http://h\"\n{sf}"
        ))
        .unwrap_err();
        assert!(e.contains("needs [collector] control"), "{e}");
    }

    #[test]
    fn the_password_comes_from_its_file() {
        let dir = std::env::temp_dir().join(format!("dta-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        let mut c = parse("url = \"http://h\"\nstate_file = \"/tmp/x\"")
            .unwrap()
            .export
            .clickhouse
            .unwrap();
        assert_eq!(c.password().unwrap(), "");
        c.password_file = Some(f.clone());
        assert_eq!(c.password().unwrap(), "s3cret");
        std::fs::write(&f, "a\nb\n").unwrap();
        assert!(c.password().unwrap_err().contains("more than one line"));
        c.password_file = Some(dir.join("missing"));
        assert!(c.password().unwrap_err().contains("password_file"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
