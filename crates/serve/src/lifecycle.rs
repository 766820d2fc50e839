//! The server as a service: SIGTERM drains (nothing new admitted, running sessions and
//! broadcasts go on up to `shutdown_grace_s`, then the clients left are told with a goodbye
//! datagram), a second SIGTERM stops at once, SIGHUP reloads the configuration (a broken
//! one is refused and the running one kept) and the role tokens, and systemd hears of each
//! step (`sd_notify`: READY, RELOADING, STOPPING) when it started the server as
//! `Type=notify`.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use isnode_proto::goodbye::{goodbye_datagram, GoodbyeReason};
use tokio::signal::unix::{signal, SignalKind};

use crate::server::start;
use crate::server::ServerHandle;
use isnode_control::registry::SessionState;
use isnode_serve_config::ServeConfig;

/// How often the drain looks at what is still running.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// The longest the signal loop waits without looking whether the data plane failed (a
/// failure wakes it at once: `Wakes::stop_notify`).
const FAILURE_CHECK: Duration = crate::wake::IDLE_WAIT;

/// What a drain ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every session and broadcast ended within the grace period.
    Idle,
    /// The grace period ran out: this many sessions were cut (their clients told).
    GraceOver(usize),
    /// A second SIGTERM (or SIGINT) came: stopped at once.
    Interrupted,
}

impl ServerHandle {
    /// Stops admitting sessions, broadcasts, uploads and new fills from the origin (`503`
    /// with `Retry-After`; fills under way go on until the server stops).
    pub fn begin_drain(&self) {
        self.shared.draining.store(true, Ordering::Release);
        self.shared.fills.drain();
    }

    /// Sessions whose client may still need the server (streaming, or sent and not yet
    /// closed by their client: it may still ask for repair) and running broadcasts.
    pub fn live_streams(&self) -> usize {
        let live = |s: SessionState| matches!(s, SessionState::Streaming | SessionState::Done);
        let sessions = self
            .shared
            .lock_sessions()
            .values()
            .filter(|s| live(s.state()) && s.owner.is_some())
            .count();
        sessions + self.shared.control.broadcasts.list().len()
    }

    /// Ends every streaming session, telling its client with a goodbye datagram; returns
    /// how many were ended.
    pub fn cut_sessions(&self) -> usize {
        let now = self.shared.now_ns();
        let sessions: Vec<_> = self.shared.lock_sessions().values().cloned().collect();
        let mut cut = 0;
        for s in sessions.iter().filter(|s| s.owner.is_some()) {
            // A session sent whole (Done) is told too: its client may still be repairing.
            if !s.end(SessionState::Deleted, now) && s.state() != SessionState::Done {
                continue;
            }
            cut += 1;
            if let Some(d) = goodbye_datagram(&s.id, GoodbyeReason::ShuttingDown) {
                // Twice: one lost datagram should not leave the client to its timeout.
                for _ in 0..2 {
                    let _ = self.shared.token_socket.send_to(&d, s.dest);
                }
            }
        }
        self.shared.control.broadcasts.clear(now);
        cut
    }

    /// Puts a reloaded configuration in force; returns the settings that need a restart and
    /// kept their running value.
    pub fn reload(&self, config: ServeConfig) -> Vec<&'static str> {
        self.shared.reload_config(config)
    }

    /// Whether role tokens are in force (a token file was read).
    pub fn has_tokens(&self) -> bool {
        let tokens = self.shared.tokens.read();
        tokens.map(|t| t.is_some()).unwrap_or(true)
    }

    /// The configuration in force.
    pub fn config(&self) -> ServeConfig {
        ServeConfig::clone(&self.shared.config())
    }
}

/// Tells systemd (when it started us with `NOTIFY_SOCKET`); a no-op otherwise.
fn notify(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::warn!("sd_notify: {e}");
    }
}

/// Runs a server until SIGTERM or SIGINT, reloading on SIGHUP with `reload` (which reads
/// the configuration file again and applies the command line over it). Exits cleanly after
/// the drain; fails if the data plane failed (a thread panicked).
pub fn run(
    volume_dir: &Path,
    config: &ServeConfig,
    reload: impl Fn() -> anyhow::Result<ServeConfig>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("creating the signal runtime")?;
    // The handlers before the API answers: a SIGTERM as soon as it does drains, rather than
    // ending the process as the default action would.
    let signals = {
        let _in = rt.enter();
        Signals::new()?
    };
    let handle = start(volume_dir, config)
        .with_context(|| format!("starting the server on {}", volume_dir.display()))?;
    eprintln!(
        "isnode serve: listening on {} (engine {}); SIGTERM drains, SIGHUP reloads",
        handle.url(),
        handle.engine().name()
    );
    let outcome = rt.block_on(supervise(&handle, &reload, signals));
    handle.shutdown();
    match outcome? {
        Stop::Failed(why) => anyhow::bail!("the server stopped: {why}"),
        Stop::Drained(d) => {
            eprintln!("isnode serve: stopped ({d:?})");
            Ok(())
        }
    }
}

/// Why [`supervise`] returned.
enum Stop {
    /// The data plane failed.
    Failed(String),
    /// A signal asked for the stop; the drain ended so.
    Drained(Drained),
}

/// The signals the server answers, their handlers installed (in a runtime's context).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("SIGHUP handler")?,
        })
    }
}

/// Waits for signals: SIGHUP reloads, SIGTERM/SIGINT drains.
async fn supervise(
    handle: &ServerHandle,
    reload: &impl Fn() -> anyhow::Result<ServeConfig>,
    signals: Signals,
) -> anyhow::Result<Stop> {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    notify(&[sd_notify::NotifyState::Ready]);
    loop {
        if let Some(why) = handle.failure() {
            return Ok(Stop::Failed(why));
        }
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => apply_reload(handle, reload),
            _ = handle.shared.wakes.stop_notify.notified() => {}
            _ = tokio::time::sleep(FAILURE_CHECK) => {}
        }
    }
    let grace = Duration::from_secs(handle.shared.config().shutdown_grace_s);
    notify(&[sd_notify::NotifyState::Stopping]);
    eprintln!(
        "isnode serve: draining: {} live streams, up to {} s (SIGTERM again to stop now)",
        handle.live_streams(),
        grace.as_secs()
    );
    handle.begin_drain();
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        if handle.live_streams() == 0 {
            return Ok(Stop::Drained(Drained::Idle));
        }
        tokio::select! {
            _ = term.recv() => return Ok(Stop::Drained(Drained::Interrupted)),
            _ = int.recv() => return Ok(Stop::Drained(Drained::Interrupted)),
            _ = tokio::time::sleep_until(deadline) => {
                return Ok(Stop::Drained(Drained::GraceOver(handle.cut_sessions())));
            }
            _ = tokio::time::sleep(DRAIN_POLL) => {}
        }
    }
}

/// SIGHUP: reads the configuration again; a broken one is refused, the running one kept.
fn apply_reload(handle: &ServerHandle, reload: &impl Fn() -> anyhow::Result<ServeConfig>) {
    notify(&[sd_notify::NotifyState::Reloading]);
    match reload() {
        Ok(config) => {
            let kept = handle.reload(config);
            if kept.is_empty() {
                tracing::info!("configuration reloaded");
                eprintln!("isnode serve: configuration reloaded");
            } else {
                tracing::warn!(
                    ?kept,
                    "configuration reloaded; these need a restart and keep their running value"
                );
                eprintln!(
                    "isnode serve: configuration reloaded; needs a restart, running value kept: {}",
                    kept.join(", ")
                );
            }
        }
        Err(e) => {
            tracing::error!("reload refused, running configuration kept: {e:#}");
            eprintln!("isnode serve: reload refused, running configuration kept: {e:#}");
        }
    }
    match handle.reload_tokens() {
        Ok(()) => eprintln!("isnode serve: tokens reloaded"),
        // No token file before and none now: nothing to reload.
        Err(_) if !handle.has_tokens() => {}
        Err(e) => {
            tracing::error!("token reload refused, the old tokens kept: {e}");
            eprintln!("isnode serve: token reload refused, the old tokens kept: {e}");
        }
    }
    notify(&[sd_notify::NotifyState::Ready]);
}
