//! TLS of the cluster's health probes: a peer named `https://host:port` is probed over TLS,
//! its certificate checked against the roots of `cluster_ca_file` (PEM: the only roots
//! then, e.g. a private CA or a self-signed node certificate) or, without it, the public
//! web roots; its name checked against the URL's host.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// Most certificates read from a CA file (a bundle larger than this is refused).
const MAX_CA_CERTS: usize = 1024;

/// The roots of the PEM file `ca_file` (at least one certificate), or the public roots
/// without it.
pub fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut store = rustls::RootCertStore::empty();
    let Some(ca) = ca_file else {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(store);
    };
    let read = |e: &dyn std::fmt::Display| format!("reading the CA file {}: {e}", ca.display());
    let mut n = 0usize;
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| read(&e))? {
        let cert = cert.map_err(|e| read(&e))?;
        n += 1;
        if n > MAX_CA_CERTS {
            return Err(read(&format!("more than {MAX_CA_CERTS} certificates")));
        }
        store.add(cert).map_err(|e| read(&e))?;
    }
    if store.is_empty() {
        return Err(format!("the CA file {}: no PEM certificate", ca.display()));
    }
    Ok(store)
}

/// The TLS connector of the probes, trusting [`roots`] of `ca_file`.
pub fn connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots(ca_file)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The name a peer's certificate must carry: the URL's host (an IP address, brackets
/// removed, or a DNS name).
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string()).map_err(|e| format!("{host:?} is no TLS name: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = roots(Some(&empty)).unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = roots(Some(&dir.path().join("missing.pem"))).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
        assert!(!roots(None).unwrap().is_empty());
        assert!(server_name("[::1]").is_ok() && server_name("h.example").is_ok());
    }
}
