//! How a benchmark's requests carry a session's secret.

/// `req` carrying a session's `secret` both ways a server has taken it: in
/// `Isnode-Session-Secret` (today's servers, which take nothing else) and as
/// `Authorization: Bearer` (servers from before that header), so that a side-by-side run
/// drives an older binary too. The benchmarks' servers have no token file: no role token.
pub(crate) fn with_session_secret<B>(
    req: ureq::RequestBuilder<B>,
    secret: &str,
) -> ureq::RequestBuilder<B> {
    req.header(isnode_proto::auth::SESSION_SECRET_HEADER, secret)
        .header("Authorization", format!("Bearer {secret}"))
}
