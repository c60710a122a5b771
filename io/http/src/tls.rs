//! TLS with rustls (the `ring` provider): server configuration from PEM files, and a client
//! configuration that trusts given certificates (the CLI, tests).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// A server configuration (TLS 1.2 and 1.3, HTTP/1.1 by ALPN) from a PEM certificate chain
/// and a PEM private key. A key file other users may read is logged as a warning.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let certs = load_certs(cert_file)?;
    if let Ok(md) = std::fs::metadata(key_file) {
        if md.permissions().mode() & 0o004 != 0 {
            log::warn!(
                "TLS key {} is readable by every user; chmod 600 it",
                key_file.display()
            );
        }
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("{}: no usable PEM private key ({e})", key_file.display()))?;
    let mut c = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "TLS certificate {} and key {}: {e}",
                cert_file.display(),
                key_file.display()
            )
        })?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// A client configuration trusting the certificates in `ca_file` (a CA, or a server's own
/// self-signed certificate) and nothing else.
pub fn client_config(ca_file: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs(ca_file)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", ca_file.display()))?;
    }
    let c = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(c))
}
