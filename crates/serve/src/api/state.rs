//! [`ApiState`]: what the control API's handlers hold. The control half's handles
//! ([`Control`]: the session and broadcast policy decide with them) and the API's own: its
//! counters, the role tokens, the members' health and the pool's boards it reports, the
//! scrub's and fills' states, the cluster, the keepalive port. Built once by the server's
//! start; the background threads hold their own handles, not this.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use isnode_control::cluster::ClusterState;
use isnode_control::registry::{SessionState, SessionTable};
use isnode_control::Control;
use isnode_plane::counters::PlaneCounters;
use isnode_pool::demand::PositionBoard;
use isnode_pool::members::{MemberState, Members};
use isnode_serve_config::{ConfigCell, ServeConfig};
use isnode_serve_core::slack::SlackBoard;
use isnode_sys::stop::Stop;

use crate::metrics::{Metrics, MetricsSnapshot};

/// What the control API's handlers hold.
pub(crate) struct ApiState {
    /// The control half's handles: configuration, clock, catalog, pool, session table,
    /// broadcasts, the data plane's queue, uploads, the control counters.
    pub control: Arc<Control>,
    /// The API's counters (content, repair, authentication, uploads, titles, egress).
    pub metrics: Arc<Metrics>,
    /// The server's stop signal (a data-plane failure stops it too).
    pub stop: Arc<Stop>,
    /// What wakes the server's sleeping threads (`wake.rs`).
    pub wakes: crate::wake::Wakes,
    /// Set by SIGTERM: new sessions, broadcasts and uploads are refused (`api/drain.rs`).
    pub draining: AtomicBool,
    /// What the data plane counts.
    pub plane_counters: Arc<PlaneCounters>,
    /// The members' health from their reads.
    pub members: Arc<Members>,
    /// Where each data-plane thread's sessions are (eviction decisions).
    pub positions: Arc<PositionBoard>,
    /// Each data-plane thread's playback slack (pacing of background work).
    pub slack: Arc<SlackBoard>,
    /// UDP port of the keepalive datagrams (`isnode_control::keepalive`), on the API's IP.
    pub keepalive_port: u16,
    /// The keepalive socket's twin: token datagrams go out from it (`api/owner.rs`).
    pub token_socket: std::net::UdpSocket,
    /// The role tokens in force (`None`: no token file); swapped by `reload_tokens`.
    pub tokens: std::sync::RwLock<Option<Arc<isnode_auth::TokenStore>>>,
    /// Failed authentications per client, which slow it down (`api/roles.rs`).
    pub auth_throttle: std::sync::Mutex<isnode_auth::throttle::Throttle>,
    /// The token file `reload_tokens` reads.
    pub tokens_path: std::path::PathBuf,
    /// When each token was last used (written beside the token file by the API's writer).
    pub last_use: isnode_auth::last_use::LastUse,
    /// The background scrub's progress and findings (`scrub.rs`).
    pub scrub: Arc<crate::scrub::ScrubState>,
    /// This edge's cluster (inactive without a node list: a single node).
    pub cluster: Arc<ClusterState>,
    /// Fills from the origin (`isnode_fill`).
    pub fills: Arc<isnode_fill::Fills>,
    /// The blocking threads catalog work (lookups, a fill's start) may take at once
    /// ([`CATALOG_THREADS`]); requests past them wait without a thread.
    pub catalog_slots: tokio::sync::Semaphore,
    /// Codewords players read, held once as contiguous bytes sent with `sendfile`
    /// (`http_mirror_bytes`; `None` when 0).
    pub mirror: Option<Arc<crate::api::mirror::Mirror>>,
    /// The content bodies reading codewords from disk at once ([`DISK_READ_THREADS`]),
    /// each on a blocking thread with a codeword's buffer; the rest wait holding neither.
    pub disk_read_slots: tokio::sync::Semaphore,
    /// Refuses new content readers when the memory cgroup's headroom would be spent.
    pub memory_gate: crate::api::memory_gate::MemoryGate,
}

/// Blocking threads the API's catalog work takes at most.
pub(crate) const CATALOG_THREADS: usize = 32;

/// Blocking threads content bodies read codewords from disk on, at most. Measured: 216
/// HTTP readers of a library larger than memory on a throttled disk each held a blocking
/// thread and a codeword's buffer while waiting for it (tokio's pool allows 512), and the
/// server's memory cgroup's OOM killer ended it (64 MB of heap beside a 22 MiB pool).
/// 32 keeps 256 block reads in flight on an 8-member volume: more than a disk queues.
pub(crate) const DISK_READ_THREADS: usize = 32;

/// Longest a content body waits for a disk read slot: as long as a body may wait for its
/// blocks.
pub(crate) const DISK_READ_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl ApiState {
    /// Writes the tokens' last uses beside the token file if they changed (blocking); a
    /// failure is logged and retried at the next call.
    pub(crate) fn flush_last_use(&self) {
        let tokens = self
            .tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(tokens) = tokens else {
            return;
        };
        let path = isnode_auth::last_use::side_path(&self.tokens_path);
        if let Err(e) = self.last_use.flush(&path, &tokens) {
            tracing::warn!("writing the tokens' last uses: {e}");
        }
    }

    /// The configuration in force (cheap: an atomic load; hold it only briefly).
    pub(crate) fn config(&self) -> arc_swap::Guard<Arc<ServeConfig>> {
        self.control.config()
    }

    /// The cell of the configuration in force (for the threads that hold their own).
    pub(crate) fn config_cell(&self) -> &ConfigCell {
        &self.control.config
    }

    /// Puts `new` in force, keeping the running values of the settings that need a restart;
    /// returns the names of those that differed (a reload reports them).
    pub(crate) fn reload_config(&self, mut new: ServeConfig) -> Vec<&'static str> {
        let old = self.config();
        let kept = old.keep_restart_only(&mut new);
        self.cluster.reconfigure(&new);
        self.control.config.store(new);
        self.wakes.reloaded.set();
        self.wakes.cluster.notify_one();
        kept
    }

    /// Wakes every data-plane thread, so that control requests just queued on a session
    /// apply at once (a full queue means the thread is awake anyway).
    pub(crate) fn wake_data_plane(&self) {
        self.control.plane.wake();
    }

    /// Nanoseconds on the server's clock.
    pub(crate) fn now_ns(&self) -> u64 {
        self.control.now_ns()
    }

    pub(crate) fn lock_sessions(&self) -> impl std::ops::DerefMut<Target = SessionTable> + '_ {
        self.control.sessions.lock_sessions()
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let m = &self.metrics;
        let c = &self.control.counters;
        let p = &self.plane_counters;
        let health = &self.members.health;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let active = self
            .lock_sessions()
            .values()
            .filter(|s| s.state() == SessionState::Streaming)
            .count() as u64;
        let cache = &self.control.cache;
        let cs = cache.stats();
        MetricsSnapshot {
            sessions_active: active,
            sessions_started: load(&c.sessions_started),
            broadcasts_active: self.control.broadcasts.list().len() as u64,
            broadcasts_started: load(&c.broadcasts_started),
            broadcast_redirects: load(&c.broadcast_redirects),
            broadcast_packets_sent: load(&p.broadcast_packets),
            broadcast_bytes_sent: load(&p.broadcast_bytes),
            sessions_expired: load(&p.sessions_expired),
            keepalives_udp: load(&c.keepalives_udp),
            keepalives_refused: load(&c.keepalives_refused),
            tokens_sent: load(&c.tokens_sent),
            sessions_unvalidated: load(&c.sessions_unvalidated),
            forbidden: load(&m.forbidden),
            sessions_refused: c.refusals(),
            packets_sent: std::array::from_fn(|i| load(&p.packets[i])),
            bytes_sent: std::array::from_fn(|i| load(&p.bytes[i])),
            send_errors: load(&p.send_errors),
            cache_hits: load(&cs.hits),
            cache_misses: load(&cs.misses),
            cache_bytes: cache.bytes_cached(),
            cache_pool_bytes: cache.pool_bytes(),
            cache_read_bytes: load(&cs.bytes_read),
            member_errors: self.members.errors(),
            symbols_rebuilt: load(&p.symbols_rebuilt),
            packets_skipped: load(&p.packets_skipped),
            zc_sends: load(&p.zc_sends),
            zc_copied: load(&p.zc_copied),
            repair_packets_sent: load(&p.repair_sent),
            repair_packets_skipped: load(&p.repair_skipped),
            loss_reports: load(&c.loss_reports),
            start_bursts: load(&c.start_bursts),
            catalog_lookups_active: self.control.objects.lookups_active(),
            http_content_requests: load(&m.http_content_requests),
            http_range_requests: load(&m.http_range_requests),
            http_bytes: load(&m.http_bytes),
            http_readers_active: load(&m.http_readers_active),
            http_readers_refused: load(&m.http_readers_refused),
            http_readers_refused_memory: load(&m.http_readers_refused_memory),
            http_mirror_bytes: self.mirror.as_ref().map_or(0, |x| x.held_bytes()),
            http_mirror_frames: self.mirror.as_ref().map_or(0, |x| load(&x.frames)),
            http_mirror_fills: self.mirror.as_ref().map_or(0, |x| load(&x.fills)),
            http_mirror_bypasses: self.mirror.as_ref().map_or(0, |x| load(&x.bypasses)),
            repair_requests: load(&m.repair_requests),
            repair_packets: load(&m.repair_packets),
            cache_evictions: load(&cs.evictions),
            scrub: self.scrub.snapshot(),
            fill: self.fills.snapshot(load(&p.sessions_held)),
            member_failed: (0..health.members() as u32)
                .map(|i| health.is_failed(i))
                .collect(),
            member_slow: (0..health.members() as u32)
                .map(|i| health.state(i, self.now_ns()) == MemberState::Slow)
                .collect(),
            reads_hedged: load(&health.hedged),
            bursts_late: load(&p.bursts_late),
            members_revived: load(&health.revived),
            playback: self.slack.total(),
        }
    }
}
