//! The origin fills read from: an S3 bucket (Garage, MinIO, AWS: `s3://BUCKET`) or a local
//! directory (`file:///DIR`, a mounted share), both through the `object_store` crate.
//!
//! A title's name is its key. [`Origin::head`] gives its size and ETag;
//! [`Origin::get_range`] one byte range of that version (`If-Match`), checked for its
//! length. Errors are classified ([`OriginError`]) into what a client is told
//! (docs/protocol.md, "Origin fills"): a missing object `404`, an object changed under a
//! fill `409`, anything else `502`. No message carries a credential: every error text goes
//! through `Redact` before it is returned, and the builders never print their options.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as StorePath;
use object_store::{GetOptions, GetRange, ObjectStore};

mod error;
mod settings;

pub use error::{ErrorClass, OriginError};
pub use settings::{OriginKind, OriginSettings};

use error::Redact;

/// Longest a connection to the origin may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest one origin request may take (a 1 MiB range at a few hundred kbit/s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of one request inside the client (the fill retries on top, from its front).
const CLIENT_RETRIES: usize = 1;

/// What the origin says of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginMeta {
    /// Its length in bytes.
    pub size_bytes: u64,
    /// Its ETag (the version every range of a fill must match).
    pub etag: String,
}

/// One configured origin.
pub struct Origin {
    store: Arc<dyn ObjectStore>,
    /// What the logs call it (`s3://BUCKET at ENDPOINT`, `file:///DIR`): never a secret.
    label: String,
    redact: Redact,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("label", &self.label)
            .finish()
    }
}

impl Origin {
    /// The origin `settings` describe; an error (redacted) if it cannot be set up.
    pub fn new(settings: &OriginSettings) -> Result<Origin, OriginError> {
        let redact = Redact::new(settings.secrets());
        let store: Arc<dyn ObjectStore> = match &settings.kind {
            OriginKind::S3 { bucket } => {
                Arc::new(settings.s3_builder(bucket).build().map_err(|e| {
                    OriginError::Refused(redact.text(&format!("setting up the S3 origin: {e}")))
                })?)
            }
            OriginKind::Dir(dir) => Arc::new(
                object_store::local::LocalFileSystem::new_with_prefix(dir).map_err(|e| {
                    OriginError::Unreachable(redact.text(&format!(
                        "opening the origin directory {}: {e}",
                        dir.display()
                    )))
                })?,
            ),
        };
        Ok(Origin {
            store,
            label: settings.label(),
            redact,
        })
    }

    /// What the logs call this origin (no secret).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The size and ETag of `key`.
    pub async fn head(&self, key: &str) -> Result<OriginMeta, OriginError> {
        let path = store_path(key)?;
        let meta = self
            .store
            .head(&path)
            .await
            .map_err(|e| error::classify(e, key, &self.redact))?;
        let etag = meta
            .e_tag
            .clone()
            .ok_or_else(|| OriginError::Garbled(format!("the origin gave no ETag for {key:?}")))?;
        Ok(OriginMeta {
            size_bytes: meta.size,
            etag,
        })
    }

    /// Bytes `range` of `key`, of the version `etag` (`If-Match`): exactly `range`'s length
    /// or an error ([`OriginError::Garbled`] for a short or long body, [`OriginError::Changed`]
    /// for another version).
    pub async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        etag: &str,
    ) -> Result<bytes::Bytes, OriginError> {
        let path = store_path(key)?;
        let want = range.end.saturating_sub(range.start);
        let opts = GetOptions {
            if_match: Some(etag.to_string()),
            range: Some(GetRange::Bounded(range.clone())),
            ..GetOptions::default()
        };
        let classify = |e| error::classify(e, key, &self.redact);
        let got = self.store.get_opts(&path, opts).await.map_err(classify)?;
        if got.meta.e_tag.as_deref().is_some_and(|t| t != etag) {
            return Err(OriginError::Changed(format!(
                "{key:?} changed at the origin (ETag no longer {etag})"
            )));
        }
        let body = bounded_body(got.into_stream(), want, key, &range, &classify).await?;
        if body.len() as u64 != want {
            return Err(OriginError::Garbled(format!(
                "the origin sent {} bytes for bytes {}..{} of {key:?} ({want} asked)",
                body.len(),
                range.start,
                range.end
            )));
        }
        Ok(body)
    }
}

/// A ranged answer's body, refused as garbled as soon as it runs past the `want` bytes
/// asked (a misbehaving origin cannot make the edge buffer more than one range).
async fn bounded_body(
    mut stream: futures_core::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    want: u64,
    key: &str,
    range: &Range<u64>,
    classify: &(dyn Fn(object_store::Error) -> OriginError + Sync),
) -> Result<bytes::Bytes, OriginError> {
    let cap = usize::try_from(want).unwrap_or(usize::MAX);
    let mut body = bytes::BytesMut::with_capacity(cap);
    while let Some(chunk) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        let chunk = chunk.map_err(classify)?;
        if body.len() as u64 + chunk.len() as u64 > want {
            return Err(OriginError::Garbled(format!(
                "the origin sent more than the {want} bytes asked for bytes {}..{} of {key:?}",
                range.start, range.end
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The object store path of title `key` (a title name is a valid key: no empty segment,
/// no `..`); anything else is refused as missing.
fn store_path(key: &str) -> Result<StorePath, OriginError> {
    StorePath::parse(key)
        .ok()
        .filter(|p| p.as_ref() == key)
        .ok_or_else(|| OriginError::NotFound(format!("{key:?} is not a valid origin key")))
}

/// The client options every S3 origin uses: bounded connection and request times.
fn client_options() -> object_store::ClientOptions {
    object_store::ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
}

/// The retry policy of the S3 client: one quick retry; the fill retries on top.
fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: CLIENT_RETRIES,
        retry_timeout: Duration::from_secs(10),
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
    }
}

#[cfg(test)]
mod tests;
