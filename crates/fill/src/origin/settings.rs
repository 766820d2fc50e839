//! Where the origin is and how to sign for it, from the configuration and the standard AWS
//! environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`).

use object_store::aws::AmazonS3Builder;

pub use isnode_serve_config::origin::OriginKind;

/// The region when neither the configuration nor `AWS_REGION` names one (Garage's
/// default `s3_region` is `garage`; AWS's default is this).
const DEFAULT_REGION: &str = "us-east-1";

/// Everything needed to reach the origin. Its `Debug` shows no secret.
#[derive(Clone)]
pub struct OriginSettings {
    /// Which origin.
    pub kind: OriginKind,
    /// The S3 endpoint (`http://host:3900` for Garage); `None`: AWS.
    pub endpoint: Option<String>,
    /// The SigV4 region.
    pub region: String,
    /// The access key id (configuration, else `AWS_ACCESS_KEY_ID`).
    pub access_key_id: Option<String>,
    /// The secret key (configuration, else `AWS_SECRET_ACCESS_KEY`).
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for OriginSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginSettings")
            .field("origin", &self.label())
            .field("region", &self.region)
            .field("credentials", &self.secret_access_key.is_some())
            .finish()
    }
}

impl OriginSettings {
    /// The origin of `config`, `None` when it has none; the environment fills in what the
    /// configuration leaves out.
    pub fn from_config(
        config: &isnode_serve_config::ServeConfig,
    ) -> Result<Option<OriginSettings>, String> {
        if config.origin.is_empty() {
            return Ok(None);
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let kind = OriginKind::parse(&config.origin)?;
        Ok(Some(OriginSettings {
            kind,
            endpoint: Some(config.origin_endpoint.clone()).filter(|e| !e.is_empty()),
            region: Some(config.origin_region.clone())
                .filter(|r| !r.is_empty())
                .or_else(|| env("AWS_REGION"))
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| DEFAULT_REGION.to_string()),
            access_key_id: config
                .origin_access_key_id
                .clone()
                .or_else(|| env("AWS_ACCESS_KEY_ID")),
            secret_access_key: config
                .origin_secret_access_key
                .as_ref()
                .map(|s| s.expose().to_string())
                .or_else(|| env("AWS_SECRET_ACCESS_KEY")),
        }))
    }

    /// The strings no message may show.
    pub fn secrets(&self) -> Vec<String> {
        self.secret_access_key.iter().cloned().collect()
    }

    /// What logs call the origin: `s3://BUCKET at ENDPOINT` or `file:///DIR`.
    pub fn label(&self) -> String {
        match &self.kind {
            OriginKind::S3 { bucket } => match &self.endpoint {
                Some(e) => format!("s3://{bucket} at {e}"),
                None => format!("s3://{bucket}"),
            },
            OriginKind::Dir(d) => format!("file://{}", d.display()),
        }
    }

    /// The S3 client's builder: path-style requests, plain HTTP allowed for an `http://`
    /// endpoint, signed when credentials are known (else unsigned: a public bucket).
    pub fn s3_builder(&self, bucket: &str) -> AmazonS3Builder {
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(&self.region)
            .with_virtual_hosted_style_request(false)
            .with_client_options(super::client_options())
            .with_retry(super::retry_config());
        if let Some(e) = &self.endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => b.with_access_key_id(id).with_secret_access_key(secret),
            _ => b.with_skip_signature(true),
        }
    }
}
