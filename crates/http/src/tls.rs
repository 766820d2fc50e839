//! HTTPS for the control API: rustls with the certificate chain and key from PEM files,
//! and the rule that plain HTTP is served only on loopback or by explicit choice
//! (`--plain-http`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How the control API is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Plain HTTP (loopback, or `--plain-http`).
    Plain,
    /// HTTPS with this certificate chain and key (PEM files).
    Tls {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key.
        key: PathBuf,
    },
}

/// Whether plain HTTP was asked for on a non-loopback address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlainHttp {
    /// Only on loopback.
    LoopbackOnly,
    /// Anywhere (`--plain-http`).
    Allowed,
}

/// The transport the flags ask for; an error if they are incomplete or would serve plain
/// HTTP on a non-loopback address without `--plain-http`.
pub fn transport(
    listen: SocketAddr,
    cert: Option<&Path>,
    key: Option<&Path>,
    plain: PlainHttp,
) -> Result<Transport, String> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Transport::Tls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }),
        (Some(_), None) => Err("--tls-cert needs --tls-key".into()),
        (None, Some(_)) => Err("--tls-key needs --tls-cert".into()),
        (None, None) if listen.ip().is_loopback() || plain == PlainHttp::Allowed => {
            Ok(Transport::Plain)
        }
        (None, None) => Err(format!(
            "the control API on {listen} (not loopback) would be plain HTTP, which anyone on \
             the path can read and change: give --tls-cert and --tls-key (`isnode cert` makes \
             a self-signed pair), or --plain-http to serve plain HTTP anyway"
        )),
    }
}

/// The TLS acceptor of `cert` (PEM certificate chain) and `key` (PEM private key).
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("reading the certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading the certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no PEM certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("reading the private key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate {} and its key: {e}", cert.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn plain_http_off_loopback_needs_the_explicit_flag() {
        let public = addr("192.0.2.7:7878");
        let e = transport(public, None, None, PlainHttp::LoopbackOnly).unwrap_err();
        assert!(
            e.contains("--plain-http") && e.contains("--tls-cert"),
            "{e}"
        );
        assert_eq!(
            transport(public, None, None, PlainHttp::Allowed),
            Ok(Transport::Plain)
        );
        let any = addr("0.0.0.0:7878");
        assert!(transport(any, None, None, PlainHttp::LoopbackOnly).is_err());
        for lo in ["127.0.0.1:1", "[::1]:1"] {
            assert_eq!(
                transport(addr(lo), None, None, PlainHttp::LoopbackOnly),
                Ok(Transport::Plain)
            );
        }
    }

    #[test]
    fn tls_needs_both_files() {
        let p = Path::new("x.pem");
        let public = addr("192.0.2.7:7878");
        assert!(transport(public, Some(p), None, PlainHttp::LoopbackOnly).is_err());
        assert!(transport(public, None, Some(p), PlainHttp::LoopbackOnly).is_err());
        assert!(matches!(
            transport(public, Some(p), Some(p), PlainHttp::LoopbackOnly),
            Ok(Transport::Tls { .. })
        ));
    }

    #[test]
    fn unreadable_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("cert.pem");
        let e = acceptor(&missing, &missing).err().unwrap();
        assert!(e.contains("reading the certificate"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = acceptor(&empty, &empty).err().unwrap();
        assert!(e.contains("no PEM certificate"), "{e}");
    }
}
