//! `isnode publish FILE --origin s3://BUCKET/KEY`: uploads a file to an S3-compatible origin
//! (Garage, MinIO, AWS) with `object_store`: one `PUT` for a file of at most one part, a
//! multipart upload of `--part-size-bytes` parts (several in flight) for a larger one.
//! Endpoint, region and credentials come from the flags or the standard environment
//! variables (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`); the secret is never printed.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, PutPayload, WriteMultipart};

/// Default part size of a multipart upload (S3 wants at least 5 MiB but for the last part).
const DEFAULT_PART_SIZE_BYTES: u64 = 16 << 20;
/// The smallest part size S3 accepts.
const MIN_PART_SIZE_BYTES: u64 = 5 << 20;
/// The largest part size accepted here (S3 allows 5 GiB; a part is held in memory).
const MAX_PART_SIZE_BYTES: u64 = 256 << 20;
/// Parts uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Bytes read from the file at a time.
const READ_BYTES: usize = 1 << 20;

/// `isnode publish`.
#[derive(Args, Debug)]
pub(crate) struct PublishArgs {
    /// The file to upload.
    pub file: PathBuf,
    /// Where: `s3://BUCKET/KEY` (`s3://BUCKET/` or `s3://BUCKET`: the file's name as the key).
    /// The key is the title's name on the edges.
    #[arg(long)]
    pub origin: String,
    /// The S3 endpoint (e.g. `http://127.0.0.1:3900` for a local Garage; default: AWS).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub origin_endpoint: Option<String>,
    /// The S3 region (SigV4; Garage's `s3_region`).
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub origin_region: String,
    /// Size of each part of a multipart upload, bytes (5 MiB to 256 MiB); a file of at most
    /// one part goes in one PUT.
    #[arg(long, default_value_t = DEFAULT_PART_SIZE_BYTES)]
    pub part_size_bytes: u64,
}

/// Bucket and key of `s3://BUCKET/KEY` (the key defaulting to `file_name`).
pub(crate) fn parse_origin(origin: &str, file_name: &str) -> anyhow::Result<(String, String)> {
    let rest = origin
        .strip_prefix("s3://")
        .with_context(|| format!("--origin {origin:?} is not s3://BUCKET/KEY"))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("--origin {origin:?} names no bucket");
    }
    let key = if key.is_empty() { file_name } else { key };
    if key.is_empty() {
        bail!("--origin {origin:?} names no key and the file has no name");
    }
    Ok((bucket.to_string(), key.to_string()))
}

/// Runs `isnode publish`.
pub(crate) fn run(args: &PublishArgs) -> anyhow::Result<()> {
    if !(MIN_PART_SIZE_BYTES..=MAX_PART_SIZE_BYTES).contains(&args.part_size_bytes) {
        bail!(
            "--part-size-bytes {} is not between {MIN_PART_SIZE_BYTES} and {MAX_PART_SIZE_BYTES}",
            args.part_size_bytes
        );
    }
    let name = args
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let (bucket, key) = parse_origin(&args.origin, name)?;
    let mut file = std::fs::File::open(&args.file)
        .with_context(|| format!("opening {}", args.file.display()))?;
    let size = file.metadata()?.len();
    let store = store(args, &bucket)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the upload runtime")?;
    let bar = crate::progress::bytes(size, "publishing");
    let path = StorePath::from(key.as_str());
    let etag = rt.block_on(async {
        if size <= args.part_size_bytes {
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            file.read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", args.file.display()))?;
            let len = bytes.len() as u64;
            let r = store
                .put(&path, PutPayload::from(bytes))
                .await
                .with_context(|| format!("uploading s3://{bucket}/{key}"))?;
            bar.inc(len);
            Ok::<_, anyhow::Error>(r.e_tag)
        } else {
            multipart(&store, &path, &mut file, args.part_size_bytes, &bar)
                .await
                .with_context(|| format!("uploading s3://{bucket}/{key} in parts"))
        }
    })?;
    bar.finish_and_clear();
    println!(
        "published {} ({size} bytes) as s3://{bucket}/{key}{}",
        args.file.display(),
        etag.map(|e| format!(" etag {e}")).unwrap_or_default()
    );
    Ok(())
}

/// The S3 client: the environment's settings (credentials included), then the flags.
fn store(args: &PublishArgs, bucket: &str) -> anyhow::Result<object_store::aws::AmazonS3> {
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(&args.origin_region)
        .with_virtual_hosted_style_request(false);
    if let Some(endpoint) = &args.origin_endpoint {
        b = b
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    b.build().context("configuring the S3 client")
}

/// A multipart upload of `file` in parts of `part_bytes`, [`PARTS_IN_FLIGHT`] at once.
async fn multipart(
    store: &object_store::aws::AmazonS3,
    path: &StorePath,
    file: &mut std::fs::File,
    part_bytes: u64,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Option<String>> {
    let upload = store.put_multipart(path).await?;
    let mut write = WriteMultipart::new_with_chunk_size(
        upload,
        usize::try_from(part_bytes).unwrap_or(usize::MAX),
    );
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = write.abort().await;
                return Err(anyhow::Error::new(e).context("reading the file"));
            }
        };
        if let Err(e) = write.wait_for_capacity(PARTS_IN_FLIGHT).await {
            return Err(e.into());
        }
        write.write(buf.get(..n).unwrap_or_default());
        bar.inc(n as u64);
    }
    let r = write.finish().await?;
    Ok(r.e_tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_name_a_bucket_and_a_key() {
        assert_eq!(
            parse_origin("s3://b/dir/t.ts", "x").unwrap(),
            ("b".into(), "dir/t.ts".into())
        );
        assert_eq!(
            parse_origin("s3://b/", "f.ts").unwrap(),
            ("b".into(), "f.ts".into())
        );
        assert_eq!(
            parse_origin("s3://b", "f.ts").unwrap(),
            ("b".into(), "f.ts".into())
        );
        assert!(parse_origin("http://b/k", "f").is_err());
        assert!(parse_origin("s3:///k", "f").is_err());
    }
}
