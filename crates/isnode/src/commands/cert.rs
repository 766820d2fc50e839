//! `isnode cert`: a self-signed certificate and its key for the control API's HTTPS.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::CertArgs;

/// Names of the certificate when none are given.
const DEFAULT_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The pair's files in `dir`: (certificate, key).
pub(crate) fn pair_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("cert.pem"), dir.join("key.pem"))
}

/// Makes a self-signed pair for `names` (default [`DEFAULT_NAMES`]) in `dir`: `cert.pem`
/// and `key.pem` (readable by the owner only); returns their paths.
pub(crate) fn make_pair(dir: &Path, names: &[String]) -> anyhow::Result<(PathBuf, PathBuf)> {
    let names: Vec<String> = if names.is_empty() {
        DEFAULT_NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        names.to_vec()
    };
    let pair = rcgen::generate_simple_self_signed(names.clone())
        .with_context(|| format!("making a certificate for {names:?}"))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (cert, key) = pair_paths(dir);
    std::fs::write(&cert, pair.cert.pem())
        .with_context(|| format!("writing {}", cert.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key)
        .with_context(|| format!("creating {}", key.display()))?;
    f.write_all(pair.signing_key.serialize_pem().as_bytes())
        .with_context(|| format!("writing {}", key.display()))?;
    Ok((cert, key))
}

/// `isnode cert --out DIR [--name NAME ...]`.
pub(crate) fn run(args: &CertArgs) -> anyhow::Result<ExitCode> {
    let (cert, key) = make_pair(&args.out, &args.names)?;
    println!(
        "certificate {} and key {}\nserve with: isnode serve --tls-cert {} --tls-key {}\nplay with:  isnode play NAME --server https://HOST:PORT --ca-cert {}",
        cert.display(),
        key.display(),
        cert.display(),
        key.display(),
        cert.display()
    );
    Ok(ExitCode::SUCCESS)
}
