//! Titles of random bytes, for the server benchmarks (their server itself: [`crate::harness`]).

use anyhow::Context;
use isnode_store::{IngestOptions, Volume};
use rand::Rng;

/// Ingests `len` random bytes from `rng` into `vol` as the MPEG-TS title `name` at
/// `bitrate_bps`.
pub(crate) fn ingest_random_title(
    vol: &mut Volume,
    name: &str,
    bitrate_bps: u64,
    len: usize,
    rng: &mut impl Rng,
) -> anyhow::Result<()> {
    let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
    let opts = IngestOptions {
        name: name.to_string(),
        bitrate_bps,
        content_type: "video/mp2t".into(),
        replace: false,
    };
    isnode_store::ingest(vol, &opts, &mut bytes.as_slice(), len as u64, &mut |_| {})
        .with_context(|| format!("ingesting {name}"))?;
    Ok(())
}
