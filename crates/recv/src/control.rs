//! HTTP client of the server's control API (`docs/protocol.md`): sessions and objects.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use isnode_proto::auth::{key_hex, Key, ValidateSession, SESSION_SECRET_HEADER};

use crate::receiver::SessionParams;

pub use isnode_proto::{ErrorBody, FecInfo, ObjectInfo, SessionInfo};

/// The receiver's parameters of a session answer, after checking that it is consistent.
pub trait SessionInfoExt {
    /// The receiver's parameters, after checking that the answer is consistent.
    fn params(&self) -> anyhow::Result<SessionParams>;
}

impl SessionInfoExt for SessionInfo {
    fn params(&self) -> anyhow::Result<SessionParams> {
        params_of(&self.object, &self.fec, self.start_codeword)
    }
}

/// The receiver's parameters of an object sent with FEC parameters `f` from
/// `start_codeword`, after checking that they are consistent.
pub fn params_of(
    o: &ObjectInfo,
    f: &FecInfo,
    start_codeword: u32,
) -> anyhow::Result<SessionParams> {
    {
        if f.encoding_id != isnode_wire::FEC_ENCODING_ID_RS28 {
            bail!(
                "session uses FEC Encoding ID {}, only 5 is supported",
                f.encoding_id
            );
        }
        if f.symbol_size != o.symbol_size || f.max_source_block_length != o.source_symbols {
            bail!(
                "session FEC parameters (E={}, B={}) contradict the object's (E={}, B={})",
                f.symbol_size,
                f.max_source_block_length,
                o.symbol_size,
                o.source_symbols
            );
        }
        let m = f
            .max_encoding_symbols
            .checked_sub(f.max_source_block_length)
            .filter(|&m| m == o.repair_symbols)
            .ok_or_else(|| {
                anyhow!(
                    "session max_encoding_symbols {} does not match B = {} + m = {}",
                    f.max_encoding_symbols,
                    f.max_source_block_length,
                    o.repair_symbols
                )
            })?;
        let params = SessionParams {
            tsi: o.tsi,
            toi: o.toi,
            transfer_length: o.size_bytes,
            symbol_len: f.symbol_size,
            max_source_block_len: f.max_source_block_length,
            repair_symbols: m,
            start_codeword,
        };
        let part = params.partition()?;
        if part.blocks() != o.codewords {
            bail!(
                "the object announces {} codewords, its size and FEC parameters give {}",
                o.codewords,
                part.blocks()
            );
        }
        Ok(params)
    }
}

/// What `POST /v1/sessions` gave.
#[derive(Debug)]
pub enum Opened {
    /// A unicast session.
    Session(Box<SessionInfo>),
    /// The title is served by broadcast: tune in to it.
    Broadcast(Box<isnode_proto::broadcast::BroadcastInfo>),
}

/// A blocking HTTP client of one server's control API. A role token given
/// ([`ControlClient::with_token`]) goes with every request as `Authorization: Bearer`
/// when the server is in the client's [`TokenScope`] (the servers it was given, and the
/// `https://` nodes those named over HTTPS); a session's secret goes with that session's
/// requests as `Isnode-Session-Secret`.
pub struct ControlClient {
    agent: ureq::Agent,
    base: String,
    /// `Authorization` header value of the role token (`Bearer TOKEN`), if any.
    bearer: Option<String>,
    /// Where the token may go.
    scope: TokenScope,
}

impl std::fmt::Debug for ControlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("ControlClient")
            .field("base", &self.base)
            .field("token", &self.bearer.as_ref().map(|_| "(set)"))
            .finish_non_exhaustive()
    }
}

impl ControlClient {
    /// A client of the server at `server` (e.g. `http://127.0.0.1:7878`); every request
    /// times out after `timeout`.
    pub fn new(server: &str, timeout: Duration) -> ControlClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .max_redirects(MAX_REDIRECTS)
            .build()
            .new_agent();
        ControlClient {
            agent,
            scope: TokenScope::given([server]),
            base: base_url(server),
            bearer: None,
        }
    }

    /// A client of the server at `server` (`https://host:port`, `http://host:port`, or
    /// `host:port` for plain HTTP) whose HTTPS connections use `tls` ([`tls_config`]).
    pub fn with_tls(server: &str, timeout: Duration, tls: ureq::tls::TlsConfig) -> ControlClient {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .max_redirects(MAX_REDIRECTS)
            .tls_config(tls)
            .build()
            .new_agent();
        ControlClient {
            agent,
            scope: TokenScope::given([server]),
            base: base_url(server),
            bearer: None,
        }
    }

    /// The client sending the role token `token` (`Authorization: Bearer`) with every
    /// request (`None` or an empty token: none).
    pub fn with_token(mut self, token: Option<&str>) -> ControlClient {
        self.bearer = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| format!("Bearer {t}"));
        self
    }

    /// The client trusting `scope` with its token (by default: its own server only).
    pub fn with_scope(mut self, scope: TokenScope) -> ControlClient {
        self.scope = scope;
        self
    }

    /// Where this client's token may go.
    pub fn scope(&self) -> &TokenScope {
        &self.scope
    }

    /// The role token's `Authorization` value for this client's server, if it has one
    /// and the server is in its scope.
    fn bearer_here(&self) -> Option<&str> {
        self.bearer
            .as_deref()
            .filter(|_| self.scope.allows(&self.base))
    }

    /// A request with the role token, if any (and the server is in the token's scope).
    fn req<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match self.bearer_here() {
            Some(b) => r.header("Authorization", b),
            None => r,
        }
    }

    /// A request of session routes: the role token, if any, and the session's `secret`.
    fn session_req<B>(&self, r: ureq::RequestBuilder<B>, secret: &str) -> ureq::RequestBuilder<B> {
        self.req(r).header(SESSION_SECRET_HEADER, secret)
    }

    /// Turns a response into its body, or an error that quotes the server's reason.
    fn body(
        what: &str,
        expect: u16,
        mut resp: ureq::http::Response<ureq::Body>,
    ) -> anyhow::Result<String> {
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_string()
            .unwrap_or_default();
        if status == expect {
            return Ok(body);
        }
        let reason = match serde_json::from_str::<ErrorBody>(&body) {
            Ok(e) => match (e.limit, e.value) {
                (Some(limit), Some(value)) => {
                    format!("{} (limit {} = {value})", e.error, limit.name())
                }
                (Some(limit), None) => format!("{} (limit {})", e.error, limit.name()),
                _ => e.error,
            },
            Err(_) => body.chars().take(200).collect(),
        };
        bail!("{what}: server answered {status}: {reason}")
    }

    /// `POST /v1/sessions`: asks for a stream of `object` to UDP `port` of this host (as the
    /// server sees it), from `start_codeword`.
    pub fn create_session(
        &self,
        object: &str,
        port: u16,
        start_codeword: u32,
    ) -> anyhow::Result<SessionInfo> {
        self.create_session_at(object, port, start_codeword, None)
    }

    /// [`ControlClient::create_session`], or, with `start_at_s`, from the last
    /// random-access point at or before that time (the answer's `start_offset_bytes`).
    pub fn create_session_at(
        &self,
        object: &str,
        port: u16,
        start_codeword: u32,
        start_at_s: Option<f64>,
    ) -> anyhow::Result<SessionInfo> {
        let req = isnode_proto::CreateSession {
            object: object.to_string(),
            port,
            start_codeword,
            start_at_s,
            no_start_burst: false,
        };
        self.create_session_req(&req)
    }

    /// `POST /v1/sessions` with a request built by the caller (e.g. `no_start_burst`).
    pub fn create_session_req(
        &self,
        req: &isnode_proto::CreateSession,
    ) -> anyhow::Result<SessionInfo> {
        match self.open(req)? {
            Opened::Session(info) => Ok(*info),
            Opened::Broadcast(b) => bail!(
                "creating the session: the server serves {} by broadcast {} instead",
                b.object.name,
                b.id
            ),
        }
    }

    /// `POST /v1/sessions`, accepting the hybrid server's answer too: a session, or the
    /// broadcast that carries the title (`200` [`isnode_proto::broadcast::SessionRedirect`]).
    /// A redirect to another node of a cluster is an error here: [`ControlClient::open_placed`]
    /// follows it.
    pub fn open(&self, req: &isnode_proto::CreateSession) -> anyhow::Result<Opened> {
        let url = format!("{}/v1/sessions", self.base);
        let resp = self
            .req(self.agent.post(&url))
            .config()
            .max_redirects(0)
            .build()
            .send_json(req)
            .with_context(|| format!("POST {url}"))?;
        Self::opened(resp)
    }

    /// A session answer: `201` a session, `200` the broadcast that carries the title.
    fn opened(resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<Opened> {
        if resp.status().as_u16() == 200 {
            let body = Self::body("creating the session", 200, resp)?;
            let r: isnode_proto::broadcast::SessionRedirect =
                serde_json::from_str(&body).context("reading the broadcast description")?;
            return Ok(Opened::Broadcast(Box::new(r.broadcast)));
        }
        let body = Self::body("creating the session", 201, resp)?;
        let info = serde_json::from_str(&body).context("reading the session description")?;
        Ok(Opened::Session(Box::new(info)))
    }

    /// `POST /v1/sessions` on a cluster of edges (docs/protocol.md, "Redirects between
    /// edges"): follows at most [`MAX_REDIRECTS`] `307`s to the node that serves the title
    /// (with [`Placement::Follow`]), or asks this node to serve it whatever the placement
    /// (with [`Placement::ServeHere`]: a client failing over along the title's ranking).
    /// The client of the server that answered, its answer, and the title's live ranking it
    /// sent (`Isnode-Ranking`; empty from a server without a node list).
    pub fn open_placed(
        &self,
        req: &isnode_proto::CreateSession,
        placement: Placement,
    ) -> anyhow::Result<Followed> {
        let mut here = self.at(&self.base);
        for _ in 0..=MAX_REDIRECTS {
            let url = format!("{}/v1/sessions", here.base);
            // ureq does not re-send a body on 307: followed here, with the token.
            let mut r = here
                .req(here.agent.post(&url))
                .config()
                .max_redirects(0)
                .build();
            if placement == Placement::ServeHere {
                r = r.header(SERVE_HERE_HEADER, "failover");
            }
            let resp = r.send_json(req).with_context(|| format!("POST {url}"))?;
            let status = resp.status().as_u16();
            if status == 307 || status == 308 {
                let location = resp
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .with_context(|| format!("POST {url}: {status} without a Location"))?;
                let base = location.strip_suffix("/v1/sessions").with_context(|| {
                    format!("POST {url}: redirected to {location:?}, not a sessions URL")
                })?;
                tracing::info!(from = %here.base, to = %base, "the title is served by another node");
                let from = here.base.clone();
                here.scope.learn(base, &from);
                here = here.at(base);
                continue;
            }
            let ranking = ranking_of(resp.headers());
            let from = here.base.clone();
            for u in &ranking {
                here.scope.learn(u, &from);
            }
            let opened = Self::opened(resp)?;
            return Ok(Followed {
                control: here,
                opened,
                ranking,
            });
        }
        bail!("creating the session: more than {MAX_REDIRECTS} redirects (a cluster whose nodes disagree?)")
    }

    /// A client of the server at `base` with this one's agent, token and scope (the token
    /// goes there only if the scope allows it).
    pub fn at(&self, base: &str) -> ControlClient {
        if self.bearer.is_some() && !self.scope.allows(base) {
            tracing::warn!(
                server = %base,
                "the role token is not sent there: plain HTTP, or a node neither given \
                 (--server) nor named over HTTPS by a server that was"
            );
        }
        ControlClient {
            agent: self.agent.clone(),
            base: base_url(base),
            bearer: self.bearer.clone(),
            scope: self.scope.clone(),
        }
    }

    /// The base URL of the server.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/sessions/{id}/keepalive` with the session's `secret`: `Ok(false)` if the
    /// server no longer knows the session.
    pub fn keepalive(&self, id: &str, secret: &str) -> anyhow::Result<bool> {
        self.keepalive_with_loss(id, secret, None)
    }

    /// `POST /v1/sessions/{id}/keepalive` carrying the loss report `loss_rate` (a JSON
    /// [`isnode_proto::KeepaliveBody`]) when given: `Ok(false)` if the session is unknown.
    pub fn keepalive_with_loss(
        &self,
        id: &str,
        secret: &str,
        loss_rate: Option<f64>,
    ) -> anyhow::Result<bool> {
        let url = format!("{}/v1/sessions/{id}/keepalive", self.base);
        let req = self.session_req(self.agent.post(&url), secret);
        let resp = match loss_rate {
            Some(loss_rate) => req.send_json(isnode_proto::KeepaliveBody { loss_rate })?,
            None => req.send_empty()?,
        };
        if resp.status().as_u16() == 404 {
            return Ok(false);
        }
        Self::body("keepalive", 204, resp).map(|_| true)
    }

    /// `POST /v1/sessions/{id}/validate`: echoes the token the session's destination
    /// received, which starts the stream. `Ok(false)`: the server refused the token
    /// (`403`: not the one it sent).
    pub fn validate(&self, info: &SessionInfo, token: &Key) -> anyhow::Result<bool> {
        let url = format!("{}/v1/sessions/{}/validate", self.base, info.id);
        let body = ValidateSession {
            token: key_hex(token),
        };
        let resp = self
            .session_req(self.agent.post(&url), &info.secret)
            .send_json(&body)
            .with_context(|| format!("POST {url}"))?;
        if resp.status().as_u16() == 403 {
            return Ok(false);
        }
        Self::body("validating the session", 204, resp).map(|_| true)
    }

    /// Return routability: waits on `socket` (the stream's) for the token datagram from
    /// an address `from_server` accepts, for at most the session's `validate_timeout_ms`,
    /// and echoes it ([`ControlClient::validate`]); the stream starts then. A token the
    /// server refuses (a datagram forged by someone who can reach the socket) is skipped
    /// and the wait goes on, [`MAX_TOKEN_TRIES`] times at most.
    pub fn await_token_and_validate(
        &self,
        info: &SessionInfo,
        socket: &UdpSocket,
        from_server: impl Fn(SocketAddr) -> bool,
    ) -> anyhow::Result<()> {
        let wait = Duration::from_millis(info.validate_timeout_ms.clamp(100, 60_000));
        let deadline = std::time::Instant::now() + wait;
        for _ in 0..MAX_TOKEN_TRIES {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let token = crate::validate::await_token(socket, left, &from_server)?;
            if self.validate(info, &token)? {
                return Ok(());
            }
            tracing::warn!("the server refused a token datagram (forged?): waiting for its own");
        }
        bail!("the server refused {MAX_TOKEN_TRIES} token datagrams: the stream's port receives forged ones")
    }

    /// `DELETE /v1/sessions/{id}` with the session's `secret`; a session the server
    /// already forgot is not an error.
    pub fn delete_session(&self, id: &str, secret: &str) -> anyhow::Result<()> {
        let url = format!("{}/v1/sessions/{id}", self.base);
        let resp = self.session_req(self.agent.delete(&url), secret).call()?;
        if resp.status().as_u16() == 404 {
            return Ok(());
        }
        Self::body("deleting the session", 204, resp).map(|_| ())
    }

    /// `GET /v1/sessions/{id}`: whether the server still streams session `id`
    /// (`Ok(false)`: it does not know it, or the session has ended).
    pub fn session_streaming(&self, id: &str) -> anyhow::Result<bool> {
        let url = format!("{}/v1/sessions/{id}", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        if resp.status().as_u16() == 404 {
            return Ok(false);
        }
        let body = Self::body("reading the session", 200, resp)?;
        let status: isnode_proto::SessionStatus =
            serde_json::from_str(&body).context("reading the session's status")?;
        Ok(status.state == isnode_proto::SessionState::Streaming)
    }

    /// `GET /v1/broadcasts`: the running broadcasts.
    pub fn broadcasts(&self) -> anyhow::Result<isnode_proto::broadcast::BroadcastList> {
        let url = format!("{}/v1/broadcasts", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        let body = Self::body("listing the broadcasts", 200, resp)?;
        Ok(serde_json::from_str(&body)?)
    }

    /// `GET /v1/broadcasts/{id}`: one broadcast's description now.
    pub fn broadcast(&self, id: &str) -> anyhow::Result<isnode_proto::broadcast::BroadcastInfo> {
        let url = format!("{}/v1/broadcasts/{id}", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        let body = Self::body("reading the broadcast", 200, resp)?;
        serde_json::from_str(&body).with_context(|| format!("reading the broadcast {id}"))
    }

    /// `GET /v1/status`: the server's status snapshot (the role token needs the metrics
    /// role on a server with a token file).
    pub fn status(&self) -> anyhow::Result<isnode_proto::status::StatusBody> {
        let url = format!("{}/v1/status", self.base);
        let req = self.req(self.agent.get(&url));
        let body = Self::body("reading the status", 200, req.call()?)?;
        Ok(serde_json::from_str(&body)?)
    }

    /// `GET /v1/objects/{name}/digests`: the packet digests of codewords `from..from +
    /// count` of `name` (checked: `symbols(sbn)` digests per codeword, in range, in order).
    pub fn digests(
        &self,
        name: &str,
        from: u32,
        count: u32,
        symbols: impl Fn(u32) -> u32,
    ) -> anyhow::Result<crate::digests::DigestRows> {
        let url = format!(
            "{}/v1/objects/{name}/digests?from={from}&count={count}",
            self.base
        );
        let mut resp = self
            .req(self.agent.get(&url))
            .call()
            .with_context(|| format!("GET {url}"))?;
        if resp.status().as_u16() != 200 {
            return Self::body("fetching packet digests", 200, resp).map(|_| Vec::new());
        }
        let limit = u64::from(count) * (6 + 255 * isnode_wire::digest::DIGEST_LEN as u64);
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .with_context(|| format!("reading {url}"))?;
        Ok(crate::digests::parse_digests(
            &body,
            from..from.saturating_add(count),
            symbols,
        )?)
    }

    /// `GET /v1/objects/{name}/index.m3u8` (an encrypted title's segments and IVs), with
    /// the role token.
    pub fn playlist(&self, name: &str) -> anyhow::Result<String> {
        let url = format!("{}/v1/objects/{name}/index.m3u8", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        Self::body("reading the title's playlist", 200, resp)
    }

    /// `GET /v1/objects/{name}/key`: the 16 bytes of an encrypted title's content key
    /// (needs a token with the viewer role).
    pub fn content_key(&self, name: &str) -> anyhow::Result<(Vec<u8>, Option<u64>)> {
        let url = format!("{}/v1/objects/{name}/key", self.base);
        let mut resp = self.req(self.agent.get(&url)).call()?;
        if resp.status().as_u16() != 200 {
            Self::body("fetching the title's key", 200, resp)?;
            bail!("fetching the title's key failed");
        }
        let expires = match resp.headers().get("isnode-key-expires") {
            None => None,
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .context("an Isnode-Key-Expires header that is not seconds")?,
            ),
        };
        let key = resp
            .body_mut()
            .with_config()
            .limit(64)
            .read_to_vec()
            .context("reading the title's key")?;
        Ok((key, expires))
    }

    /// `GET /v1/objects/{name}/index.m3u8` of an encrypted title: the playlist's text, or
    /// `None` for the `501` an older server answers for a CMAF title in CENC `cbcs`.
    pub fn hls_playlist(&self, name: &str) -> anyhow::Result<Option<String>> {
        let url = format!("{}/v1/objects/{name}/index.m3u8", self.base);
        let mut resp = self.req(self.agent.get(&url)).call()?;
        match resp.status().as_u16() {
            501 => Ok(None),
            200 => resp
                .body_mut()
                .with_config()
                .limit(MAX_PLAYLIST_BYTES)
                .read_to_string()
                .context("reading the title's playlist")
                .map(Some),
            _ => Self::body("reading the title's playlist", 200, resp).map(Some),
        }
    }

    /// `GET` of `len` bytes from `offset` of the resource `uri` of the object `name` (a URI
    /// of its playlist, relative to `/v1/objects/{name}/`), with a `Range` header: the
    /// bytes, exactly `len` of them (an answer other than `206` with that many is an error).
    pub fn object_range(
        &self,
        name: &str,
        uri: &str,
        (offset, len): (u64, u64),
    ) -> anyhow::Result<Vec<u8>> {
        if len == 0 || uri.contains("://") || uri.starts_with('/') {
            bail!("an init segment of {len} bytes at {uri:?}: not one of the title's ranges");
        }
        let url = format!("{}/v1/objects/{name}/{uri}", self.base);
        self.ranged_get(&url, (offset, len), "the title's init segment")
    }

    /// Whether `name` is encrypted, from its HLS playlist: an MPEG-TS title's carries
    /// `#EXT-X-KEY` lines, and a CMAF title in CENC `cbcs` answers `501` (its MPD plays
    /// it). Any other answer (a clear title, a container without a playlist) is clear.
    pub fn is_encrypted(&self, name: &str) -> anyhow::Result<bool> {
        let url = format!("{}/v1/objects/{name}/index.m3u8", self.base);
        let mut resp = self.req(self.agent.get(&url)).call()?;
        match resp.status().as_u16() {
            501 => Ok(true),
            200 => {
                let text = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_PLAYLIST_BYTES)
                    .read_to_string()
                    .context("reading the title's playlist")?;
                Ok(text.lines().any(|l| l.starts_with("#EXT-X-KEY:")))
            }
            _ => Ok(false),
        }
    }

    /// `GET /v1/titles` as JSON (the titles with renditions; `isnode play TITLE`).
    pub fn titles_json(&self) -> anyhow::Result<String> {
        let url = format!("{}/v1/titles", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        Self::body("listing the titles", 200, resp)
    }

    /// `GET /v1/objects/{name}/index`: the object's random-access points.
    pub fn media_index(&self, name: &str) -> anyhow::Result<isnode_proto::MediaIndex> {
        let url = format!("{}/v1/objects/{name}/index", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        let body = Self::body("reading the object's index", 200, resp)?;
        serde_json::from_str(&body).with_context(|| format!("reading the index of {name}"))
    }

    /// `GET /o/{name}` with `Range: bytes=0-{len - 1}`: the first `len` bytes of the
    /// object (at most [`MAX_HEAD_BYTES`]; a CMAF rendition's initialization segment).
    pub fn head_bytes(&self, name: &str, len: u64) -> anyhow::Result<Vec<u8>> {
        if len == 0 || len > MAX_HEAD_BYTES {
            bail!("{len} bytes of the start of {name}: between 1 and {MAX_HEAD_BYTES} are read");
        }
        let url = format!("{}/o/{name}", self.base);
        self.ranged_get(&url, (0, len), "the start of the object")
    }

    /// `GET url` of the `len` (> 0) bytes from `offset` (a `Range` request): exactly those
    /// bytes, or an error naming `what` (an answer other than `206` with that many).
    fn ranged_get(
        &self,
        url: &str,
        (offset, len): (u64, u64),
        what: &str,
    ) -> anyhow::Result<Vec<u8>> {
        let range = format!("bytes={offset}-{}", offset + len - 1);
        let req = self.req(self.agent.get(url)).header("Range", &range);
        let mut resp = req.call().with_context(|| format!("GET {url}"))?;
        if resp.status().as_u16() != 206 {
            Self::body(&format!("reading {what}"), 206, resp)?;
            bail!("reading {what} failed");
        }
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(len)
            .read_to_vec()
            .with_context(|| format!("reading {what} from {url}"))?;
        if bytes.len() as u64 != len {
            bail!(
                "{what} at {url}: {} bytes, not the {len} asked for",
                bytes.len()
            );
        }
        Ok(bytes)
    }

    /// Reads at most `len` bytes (at most [`MAX_HEAD_BYTES`]) of object `name` from its
    /// start (`GET /o/{name}` with a `Range`), for at most `budget` after the first bytes
    /// came (which must come within [`PROBE_FIRST_BYTE`] + `budget`), and times them: a
    /// sample of the path's rate (`isnode play TITLE`'s first
    /// estimate, [`crate::abr::first_estimate_bps`]). The bytes are dropped.
    pub fn probe(&self, name: &str, len: u64, budget: Duration) -> anyhow::Result<ProbeSample> {
        use std::io::Read;
        if len == 0 || len > MAX_HEAD_BYTES {
            bail!("a probe of {len} bytes of {name}: between 1 and {MAX_HEAD_BYTES} are read");
        }
        let url = format!("{}/o/{name}", self.base);
        // The whole probe within its budget and the first bytes' wait (PROBE_FIRST_BYTE):
        // a server slow to answer (an edge still filling the rung) gives no estimate
        // rather than a late start.
        let req = self
            .req(self.agent.get(&url))
            .header("Range", format!("bytes=0-{}", len - 1))
            .config()
            .timeout_global(Some(PROBE_FIRST_BYTE + budget))
            .build();
        let mut resp = req.call().with_context(|| format!("GET {url}"))?;
        if !matches!(resp.status().as_u16(), 200 | 206) {
            Self::body("probing the path", 206, resp)?;
            bail!("probing the path with {name} failed");
        }
        let mut body = resp.body_mut().with_config().limit(len).reader();
        let mut buf = vec![0u8; 16 << 10];
        let (mut first, mut last, mut after_first) = (None::<std::time::Instant>, None, 0u64);
        let mut total = 0u64;
        while total < len && first.is_none_or(|t| t.elapsed() < budget) {
            let n = body
                .read(&mut buf)
                .with_context(|| format!("reading {url}"))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            match first {
                None => first = Some(std::time::Instant::now()),
                Some(_) => {
                    after_first += n as u64;
                    last = Some(std::time::Instant::now());
                }
            }
        }
        let span = match (first, last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            _ => Duration::ZERO,
        };
        Ok(ProbeSample {
            bytes_after_first: after_first,
            span,
        })
    }

    /// `GET /v1/objects/{name}`.
    pub fn object(&self, name: &str) -> anyhow::Result<ObjectInfo> {
        let url = format!("{}/v1/objects/{name}", self.base);
        let resp = self.req(self.agent.get(&url)).call()?;
        let body = Self::body("reading the object", 200, resp)?;
        Ok(serde_json::from_str(&body)?)
    }

    /// The server's socket address (the host of the URL, resolved; port 80 by default,
    /// 443 for HTTPS).
    pub fn server_addr(&self) -> anyhow::Result<SocketAddr> {
        let (rest, default_port) = match self.base.strip_prefix("https://") {
            Some(rest) => (rest, 443),
            None => (
                self.base.strip_prefix("http://").ok_or_else(|| {
                    anyhow!(
                        "server URL {} must start with http:// or https://",
                        self.base
                    )
                })?,
                80,
            ),
        };
        let authority = rest.split('/').next().unwrap_or(rest);
        let with_port = if authority.ends_with(']') || !authority.contains(':') {
            format!("{authority}:{default_port}")
        } else {
            authority.to_string()
        };
        with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .ok_or_else(|| anyhow!("{authority} resolves to no address"))
    }
}

/// Largest playlist read to tell whether a title is encrypted, bytes (a day of 2 s segments
/// with a key line each is about 12 MiB; the key lines come before the first segment).
const MAX_PLAYLIST_BYTES: u64 = 16 << 20;

/// How long [`ControlClient::probe`] waits for its first bytes, at most (the whole probe
/// takes at most this plus its budget).
pub const PROBE_FIRST_BYTE: Duration = Duration::from_secs(1);

/// What [`ControlClient::probe`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSample {
    /// Bytes read after the first read that returned any (the first one's time is the
    /// start: the request's round trip and the server's first byte are not the path's rate).
    pub bytes_after_first: u64,
    /// From the first read to the last.
    pub span: Duration,
}

/// Most bytes [`ControlClient::head_bytes`] reads (a CMAF initialization segment is a few
/// kilobytes).
pub const MAX_HEAD_BYTES: u64 = 4 << 20;

/// Most redirects followed for one request (a cluster redirects at most to the node that
/// serves the title; more means its nodes disagree).
pub const MAX_REDIRECTS: u32 = 4;
/// The header a client failing over along a title's ranking sends with its session request:
/// the node serves the title whatever its placement says (docs/protocol.md).
pub const SERVE_HERE_HEADER: &str = "isnode-serve-here";
/// The header with a title's live ranking: its nodes' URLs, the owner first, `, ` between.
pub const RANKING_HEADER: &str = "isnode-ranking";

/// Whether a session request follows the cluster's placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Follow redirects to the node that serves the title.
    Follow,
    /// Ask this node to serve it (failing over along the ranking).
    ServeHere,
}

/// A session request answered after redirects ([`ControlClient::open_placed`]).
pub struct Followed {
    /// The client of the server that answered.
    pub control: ControlClient,
    /// Its answer.
    pub opened: Opened,
    /// The title's live ranking as that server sent it (base URLs, the owner first).
    pub ranking: Vec<String>,
}

/// The URLs of an `Isnode-Ranking` header (none without one).
pub fn ranking_of(headers: &ureq::http::HeaderMap) -> Vec<String> {
    headers
        .get(RANKING_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(parse_ranking)
        .unwrap_or_default()
}

/// Most nodes of a ranking a client keeps (the rest of a longer header is ignored).
pub const MAX_RANKING_NODES: usize = 64;

/// The value of an `Isnode-Ranking` header as base URLs, in order, at most
/// [`MAX_RANKING_NODES`] of them.
pub fn parse_ranking(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .take(MAX_RANKING_NODES)
        .map(base_url)
        .collect()
}

/// Most origins a [`TokenScope`] holds (the servers given, a ranking, redirects).
pub const MAX_SCOPE_ORIGINS: usize = 256;

/// Where a client's role token may go (docs/protocol.md, "What a token may reach"): the
/// origins of the servers it was given (`--server A,B,...`, whatever their scheme: the
/// user's choice), and the `https://` nodes that a server in the scope, itself reached over
/// HTTPS, named (a redirect's `Location`, an `Isnode-Ranking`). Never a plain-HTTP URL it
/// was not given, never a node named over plain HTTP (anyone on the path may have written
/// it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenScope {
    origins: Vec<String>,
}

impl TokenScope {
    /// The scope of the servers given.
    pub fn given<'a>(servers: impl IntoIterator<Item = &'a str>) -> TokenScope {
        let mut scope = TokenScope::default();
        for s in servers {
            scope.add(s);
        }
        scope
    }

    fn add(&mut self, url: &str) {
        if let Some(o) = origin(url) {
            if !self.origins.contains(&o) && self.origins.len() < MAX_SCOPE_ORIGINS {
                self.origins.push(o);
            }
        }
    }

    /// Whether the token may go to `url`.
    pub fn allows(&self, url: &str) -> bool {
        origin(url).is_some_and(|o| self.origins.contains(&o))
    }

    /// `url` as named by the server at `from`: in the scope from now on when both are
    /// `https://` and `from` is in it. Whether it is in the scope.
    pub fn learn(&mut self, url: &str, from: &str) -> bool {
        let https = |u: &str| base_url(u).to_ascii_lowercase().starts_with("https://");
        if https(url) && https(from) && self.allows(from) {
            self.add(url);
        }
        self.allows(url)
    }
}

/// The origin of a URL (`scheme://host:port`, lowercase, the scheme's default port
/// written out); `None` for another scheme or a URL with user information.
pub fn origin(url: &str) -> Option<String> {
    let url = base_url(url);
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(match authority.contains(':') && !authority.ends_with(']') {
        true => format!("{scheme}://{authority}"),
        false => format!("{scheme}://{authority}:{port}"),
    })
}

/// Most token datagrams a client echoes before giving up (see
/// [`ControlClient::await_token_and_validate`]).
pub const MAX_TOKEN_TRIES: usize = 8;

/// The TLS settings of a client of the control API: the certificates of the PEM file
/// `ca_cert` as the only trusted roots (a self-signed server: `isnode cert`), or the
/// public roots without it.
pub fn tls_config(ca_cert: Option<&std::path::Path>) -> anyhow::Result<ureq::tls::TlsConfig> {
    let Some(ca) = ca_cert else {
        return Ok(ureq::tls::TlsConfig::default());
    };
    let pem = std::fs::read(ca)
        .with_context(|| format!("reading the CA certificate {}", ca.display()))?;
    let certs = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing the CA certificate {}", ca.display()))?;
    if certs.is_empty() {
        bail!("{}: no PEM certificate", ca.display());
    }
    Ok(ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
        .build())
}

/// The base URL of `server`: as given without its trailing `/`, with `http://` in
/// front of a bare `host:port`.
pub fn base_url(server: &str) -> String {
    let s = server.trim_end_matches('/');
    if s.contains("://") {
        s.to_string()
    } else {
        format!("http://{s}")
    }
}

/// How many bytes at the start of the session's first codeword come before its
/// `start_offset_bytes` (0 without one): what `play --start-at` drops from its output.
pub fn leading_skip_bytes(info: &SessionInfo) -> anyhow::Result<u64> {
    let Some(offset) = info.start_offset_bytes else {
        return Ok(0);
    };
    let part = info.params()?.partition()?;
    let sbn = info.start_codeword;
    if sbn >= part.blocks() {
        return Ok(0);
    }
    let first = part.block_offset(sbn);
    let skip = offset
        .checked_sub(first)
        .filter(|&s| s < part.block_bytes(sbn));
    skip.ok_or_else(|| {
        anyhow!(
            "the server says playback starts at byte {offset}, outside codeword {sbn} \
             (bytes {first}..{})",
            first + part.block_bytes(sbn)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ranking_is_base_urls_in_order_and_bounded() {
        assert_eq!(
            parse_ranking(" http://a:1/ , b:2,, https://c "),
            vec!["http://a:1", "http://b:2", "https://c"]
        );
        assert!(parse_ranking("").is_empty());
        let long = vec!["n:1"; MAX_RANKING_NODES + 10].join(",");
        assert_eq!(parse_ranking(&long).len(), MAX_RANKING_NODES);
    }

    fn sample() -> SessionInfo {
        serde_json::from_str(
            r#"{
              "id": "5f0c3a9e1b2d4c6f",
              "secret": "9b1f5c0e7d3a48b2a6c4e8f01d2b3c4d",
              "validate_timeout_ms": 3000,
              "destination": "127.0.0.1:40000",
              "object": {"name": "movie.ts", "size_bytes": 10000000, "bitrate_bps": 4000000,
                         "duration_s": 20.0, "content_type": "video/mp2t", "symbol_size": 1408,
                         "source_symbols": 223, "repair_symbols": 32, "codewords": 32,
                         "tsi": 2857740885, "toi": 7},
              "start_codeword": 0, "send_rate_bps": 4712345, "keepalive_interval_ms": 1000,
              "session_timeout_ms": 5000, "fdt_xml": "<x/>",
              "fec": {"encoding_id": 5, "symbol_size": 1408, "max_source_block_length": 223,
                      "max_encoding_symbols": 255}
            }"#,
        )
        .unwrap()
    }

    #[test]
    fn parses_the_protocol_example() {
        let s = sample();
        let p = s.params().unwrap();
        assert_eq!(
            (p.tsi, p.toi, p.transfer_length, p.symbol_len),
            (2857740885, 7, 10_000_000, 1408)
        );
        assert_eq!((p.max_source_block_len, p.repair_symbols), (223, 32));
    }

    #[test]
    fn leading_skip_is_inside_the_start_codeword() {
        let mut s = sample();
        assert_eq!(leading_skip_bytes(&s).unwrap(), 0);
        let part = s.params().unwrap().partition().unwrap();
        s.start_codeword = 3;
        s.start_offset_bytes = Some(part.block_offset(3) + 188);
        assert_eq!(leading_skip_bytes(&s).unwrap(), 188);
        s.start_offset_bytes = Some(part.block_offset(4));
        assert!(leading_skip_bytes(&s).is_err());
        s.start_offset_bytes = Some(part.block_offset(3) - 1);
        assert!(leading_skip_bytes(&s).is_err());
    }

    #[test]
    fn rejects_inconsistent_answers() {
        let mut s = sample();
        s.object.codewords = 31;
        assert!(s.params().unwrap_err().to_string().contains("codewords"));
        let mut s = sample();
        s.fec.max_encoding_symbols = 250;
        assert!(s.params().is_err());
        let mut s = sample();
        s.fec.encoding_id = 6;
        assert!(s.params().is_err());
        let mut s = sample();
        s.fec.symbol_size = 1024;
        assert!(s.params().is_err());
    }

    #[test]
    fn server_addresses() {
        let c = |u: &str| ControlClient::new(u, Duration::from_secs(1)).server_addr();
        assert_eq!(
            c("http://127.0.0.1:7878/").unwrap(),
            "127.0.0.1:7878".parse().unwrap()
        );
        assert_eq!(c("http://[::1]").unwrap(), "[::1]:80".parse().unwrap());
        assert_eq!(c("127.0.0.1:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(
            c("https://127.0.0.1").unwrap(),
            "127.0.0.1:443".parse().unwrap()
        );
        assert_eq!(base_url("127.0.0.1:9/"), "http://127.0.0.1:9");
        assert_eq!(base_url("https://h:1"), "https://h:1");
        assert_eq!(c("http://[::1]:9/x").unwrap(), "[::1]:9".parse().unwrap());
        assert!(c("ftp://127.0.0.1").is_err());
    }

    #[test]
    fn a_token_reaches_given_servers_and_https_nodes_named_over_https() {
        assert_eq!(
            origin("HTTPS://H.example/x").as_deref(),
            Some("https://h.example:443")
        );
        assert_eq!(origin("127.0.0.1:9").as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(origin("http://[::1]").as_deref(), Some("http://[::1]:80"));
        assert_eq!(origin("http://u@h"), None);
        assert_eq!(origin("ftp://h"), None);
        let mut s = TokenScope::given(["http://a:1", "https://b:2/"]);
        assert!(s.allows("http://a:1/v1/sessions") && s.allows("https://b:2"));
        assert!(!s.allows("https://a:1") && !s.allows("http://b:2"));
        // Named by the plain-HTTP server: not trusted, whatever the scheme.
        assert!(!s.learn("https://c:3", "http://a:1"));
        // Named over HTTPS by a trusted server: an https:// node is, an http:// one is not.
        assert!(s.learn("https://c:3", "https://b:2"));
        assert!(!s.learn("http://d:4", "https://b:2"));
        // Named over HTTPS by a server outside the scope: not trusted.
        assert!(!s.learn("https://e:5", "https://stranger:6"));
        assert!(s.learn("https://e:5", "https://c:3"));
    }

    /// A listener that answers each of `answers` to one connection and records each
    /// request (head and body) as text.
    fn recorder(answers: Vec<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for answer in answers {
                let (mut c, _) = l.accept().unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as much body as it announces (a small JSON).
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                    if let Some(at) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= at + 4 + len {
                            break;
                        }
                    }
                }
                seen.push(String::from_utf8_lossy(&got).into_owned());
                c.write_all(answer.as_bytes()).unwrap();
            }
            seen
        });
        (url, t)
    }

    /// `POST /v1/sessions` redirected from the server given to `http://` node B: B gets the
    /// request without the token, unless B was given too (`--server A,B`).
    #[test]
    fn a_redirect_to_plain_http_carries_no_token() {
        for b_given in [false, true] {
            let refused = "HTTP/1.1 503 Busy\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            let (b, b_seen) = recorder(vec![refused.to_string()]);
            let to_b = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {b}/v1/sessions\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            );
            let (a, a_seen) = recorder(vec![to_b]);
            let mut client =
                ControlClient::new(&a, Duration::from_secs(5)).with_token(Some("5ec4e7"));
            if b_given {
                client = client.with_scope(TokenScope::given([a.as_str(), b.as_str()]));
            }
            let req = isnode_proto::CreateSession {
                object: "t.ts".into(),
                port: 5000,
                start_codeword: 0,
                start_at_s: None,
                no_start_burst: false,
            };
            let e = client.open_placed(&req, Placement::Follow).err().unwrap();
            assert!(e.to_string().contains("503"), "{e:#}");
            let (a_seen, b_seen) = (a_seen.join().unwrap(), b_seen.join().unwrap());
            assert!(a_seen[0]
                .to_ascii_lowercase()
                .contains("authorization: bearer 5ec4e7"));
            assert!(b_seen[0].starts_with("POST /v1/sessions"), "{}", b_seen[0]);
            assert_eq!(
                b_seen[0].contains("5ec4e7"),
                b_given,
                "the token at B (given: {b_given}):\n{}",
                b_seen[0]
            );
        }
    }

    /// A session answered by the plain-HTTP server given, with a ranking naming other
    /// nodes: none of them is in the token's reach (named over plain HTTP), the server given
    /// is.
    #[test]
    fn a_ranking_named_over_plain_http_gets_no_token() {
        let body = serde_json::to_string(&sample()).unwrap();
        let answer = format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
             isnode-ranking: http://b.example:2, https://c.example:3\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let (a, seen) = recorder(vec![answer]);
        let client = ControlClient::new(&a, Duration::from_secs(5)).with_token(Some("5ec4e7"));
        let req = isnode_proto::CreateSession {
            object: "movie.ts".into(),
            port: 5000,
            start_codeword: 0,
            start_at_s: None,
            no_start_burst: false,
        };
        let followed = client.open_placed(&req, Placement::Follow).unwrap();
        assert!(seen.join().unwrap()[0].contains("5ec4e7"));
        assert_eq!(followed.ranking.len(), 2);
        let scope = followed.control.scope();
        assert!(scope.allows(&a));
        for u in &followed.ranking {
            assert!(!scope.allows(u), "{u} is in the token's reach");
            assert!(followed.control.at(u).bearer_here().is_none(), "{u}");
        }
    }
}
