//! The soak's churn: the namespace, the server, the clients and what is done to them.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::config::SoakConfig;
use crate::harness::server::{answers_in_time, ServerChild};

/// What the churn did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Actions {
    /// Clients started (including seeks and restarts).
    pub sessions_started: u64,
    /// Clients refused by admission (`503` naming a limit): counted, not errors.
    pub sessions_refused: u64,
    /// Clients killed (vanished without a word).
    pub stops: u64,
    /// Seeks (a client killed and started again elsewhere).
    pub seeks: u64,
    /// Pauses (SIGSTOP then SIGCONT).
    pub pauses: u64,
    /// Clients stopped until the server timed their session out.
    pub timeouts: u64,
    /// Clients that played to the end of their title.
    pub finished: u64,
    /// Uploads.
    pub uploads: u64,
    /// Deletes.
    pub deletes: u64,
    /// Broadcasts started.
    pub broadcasts_started: u64,
    /// Broadcasts refused with 503 (the budget).
    pub broadcasts_refused: u64,
    /// Broadcasts stopped early.
    pub broadcasts_stopped: u64,
}

/// Where the server listens inside the namespace (nothing else lives there).
const BASE: &str = "http://127.0.0.1:7878";
/// The server's session timeout: a stopped client's session ends after this.
const SESSION_TIMEOUT_MS: u64 = 3000;
/// Most errors kept word for word.
const MAX_ERRORS_KEPT: usize = 50;
/// Most playing time of the uploaded title, seconds.
const UPLOAD_S: u64 = 20;
/// Uploaded titles kept at once (the oldest is deleted past it).
const MAX_UPLOADS: usize = 3;

/// A network namespace with loopback up and a multicast route; deleted when dropped.
struct Namespace {
    name: String,
}

impl Namespace {
    fn create() -> anyhow::Result<Self> {
        let name = format!("isnode-soak-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Namespace { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up", "multicast", "on"])?;
        ip(&["-n", &ns.name, "route", "add", "224.0.0.0/4", "dev", "lo"])?;
        Ok(ns)
    }

    /// A command that runs `program` inside the namespace. It is killed when the soak dies
    /// (`PR_SET_PDEATHSIG`, kept across the exec), so an interrupted soak leaves no server
    /// or client behind.
    fn command(&self, program: &Path) -> Command {
        use std::os::unix::process::CommandExt as _;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        // SAFETY: prctl(2) is async-signal-safe; the closure touches no memory of the parent.
        #[allow(unsafe_code)]
        unsafe {
            c.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (install iproute2; root needed)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {} (the soak needs root)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// What a client is expected to end with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Success (it plays to the end, unless the soak makes it leave first).
    Success,
    /// Anything: it was killed, or its title deleted under it.
    Anything,
}

/// What is being done to a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Running.
    Running,
    /// Stopped until then, then continued.
    Paused(Instant),
    /// Stopped until then, then killed (its session timed out meanwhile).
    TimingOut(Instant),
}

struct Client {
    child: Child,
    title: String,
    expect: Expect,
    hold: Hold,
    /// When the viewer leaves (killed, as a closed player would be).
    leave_at: Instant,
    log: PathBuf,
}

/// The soak in progress.
pub(super) struct Churn {
    exe: PathBuf,
    ns: Namespace,
    dir: tempfile::TempDir,
    server: Option<ServerChild>,
    rng: StdRng,
    sessions: usize,
    titles: Vec<String>,
    title_s: u64,
    uploads: VecDeque<String>,
    upload_file: PathBuf,
    next_upload: u64,
    next_client: u64,
    clients: Vec<Client>,
    broadcasts: Vec<String>,
    last_upload: Duration,
    last_broadcast: Duration,
    actions: Actions,
    errors: Vec<String>,
    error_count: u64,
}

impl Churn {
    /// Makes the namespace, the titles and the volume, and starts the server.
    pub(super) fn start(cfg: &SoakConfig) -> anyhow::Result<Churn> {
        let ns = Namespace::create()?;
        let dir = tempfile::tempdir().context("creating the soak directory")?;
        let vol = dir.path().join("vol");
        let mut titles = Vec::new();
        for i in 0..cfg.titles.max(1) {
            let file = dir.path().join(format!("title-{i}.ts"));
            gen_ts(
                &cfg.isnode_exe,
                &file,
                cfg.bitrate_bps,
                cfg.title_s,
                i as u64 + 1,
            )?;
            let name = format!("title-{i}.ts");
            run_ok(
                Command::new(&cfg.isnode_exe)
                    .arg("--volume")
                    .arg(&vol)
                    .args(["ingest"])
                    .arg(&file)
                    .args(["--name", &name]),
            )?;
            titles.push(name);
        }
        let upload_file = dir.path().join("upload.ts");
        gen_ts(
            &cfg.isnode_exe,
            &upload_file,
            cfg.bitrate_bps,
            cfg.title_s.min(20),
            1000,
        )?;
        let child = ns
            .command(&cfg.isnode_exe)
            .arg("--volume")
            .arg(&vol)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:7878",
                "--session-timeout-ms",
                &SESSION_TIMEOUT_MS.to_string(),
            ])
            // Every client comes from 127.0.0.1: the per-client limit would refuse them.
            .args(["--max-sessions-per-client", "100000"])
            .args(
                cfg.cache_size_bytes
                    .map(|b| vec!["--cache-size-bytes".to_string(), b.to_string()])
                    .unwrap_or_default(),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log"))?)
            .spawn()
            .context("starting isnode serve")?;
        let mut churn = Churn {
            exe: cfg.isnode_exe.clone(),
            ns,
            dir,
            server: Some(ServerChild(child)),
            rng: StdRng::seed_from_u64(cfg.seed),
            sessions: cfg.sessions,
            titles,
            title_s: cfg.title_s,
            uploads: VecDeque::new(),
            upload_file,
            next_upload: 0,
            next_client: 0,
            clients: Vec::new(),
            broadcasts: Vec::new(),
            last_upload: Duration::ZERO,
            last_broadcast: Duration::ZERO,
            actions: Actions::default(),
            errors: Vec::new(),
            error_count: 0,
        };
        churn.wait_ready()?;
        Ok(churn)
    }

    /// The server's pid (`ip netns exec` execs it in place).
    pub(super) fn server_pid(&self) -> u32 {
        self.server.as_ref().map_or(0, |s| s.0.id())
    }

    /// Clients running now.
    pub(super) fn running(&self) -> usize {
        self.clients.len()
    }

    /// Errors so far.
    pub(super) fn error_count(&self) -> u64 {
        self.error_count
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        if answers_in_time(|| {
            self.curl(&["-o", "/dev/null", &format!("{BASE}/v1/objects")])
                .is_ok_and(|c| c == 200)
        }) {
            return Ok(());
        }
        bail!(
            "the server did not answer within 20 s (log: {})",
            self.dir.path().join("server.log").display()
        )
    }

    fn error(&mut self, e: String) {
        self.error_count += 1;
        if self.errors.len() < MAX_ERRORS_KEPT {
            self.errors.push(e);
        }
    }

    /// One turn of the churn, `elapsed` into the run.
    pub(super) fn tick(&mut self, elapsed: Duration) {
        self.reap();
        self.release_holds();
        while self.clients.len() < self.sessions {
            if let Err(e) = self.start_client(None) {
                self.error(format!("starting a client: {e:#}"));
                break;
            }
        }
        self.disturb_clients();
        if elapsed.saturating_sub(self.last_upload) >= Duration::from_secs(8) {
            self.last_upload = elapsed;
            self.upload_and_delete();
        }
        if elapsed.saturating_sub(self.last_broadcast) >= Duration::from_secs(6) {
            self.last_broadcast = elapsed;
            self.broadcast();
        }
    }

    fn start_client(&mut self, title: Option<String>) -> anyhow::Result<()> {
        let title = match title {
            Some(t) => t,
            None => {
                let pool: Vec<&String> = self.titles.iter().chain(self.uploads.iter()).collect();
                let i = self.rng.random_range(0..pool.len().max(1));
                pool.get(i).map(|s| s.to_string()).context("no titles")?
            }
        };
        let length_s = if title.starts_with("upload-") {
            self.title_s.min(UPLOAD_S)
        } else {
            self.title_s
        };
        let start_at = self.rng.random_range(0..length_s.max(2) / 2);
        let leave_at = Instant::now() + Duration::from_millis(self.rng.random_range(3_000..15_000));
        self.next_client += 1;
        let log = self
            .dir
            .path()
            .join(format!("client-{}.log", self.next_client % 64));
        let child = self
            .ns
            .command(&self.exe)
            .args([
                "play",
                &title,
                "--server",
                BASE,
                "--timeout-s",
                "10",
                "--resume-after-ms",
                "1000",
            ])
            .args(["--start-at", &start_at.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting isnode play")?;
        self.actions.sessions_started += 1;
        self.clients.push(Client {
            child,
            title,
            expect: Expect::Success,
            hold: Hold::Running,
            leave_at,
            log,
        });
        Ok(())
    }

    /// Collects clients that ended; an unexpected failure is an error.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.clients.len() {
            let status = match self.clients[i].child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => {
                    self.error(format!("waiting for a client: {e}"));
                    i += 1;
                    continue;
                }
            };
            let c = self.clients.swap_remove(i);
            if status.success() {
                self.actions.finished += 1;
            } else if c.expect == Expect::Success {
                let tail = std::fs::read_to_string(&c.log).unwrap_or_default();
                if tail.contains("server answered 503") {
                    // Admission said no (naming its limit): the server doing its job.
                    self.actions.sessions_refused += 1;
                    continue;
                }
                let tail: String = tail.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                self.error(format!("client of {} ended with {status}: {tail}", c.title));
            }
        }
    }

    fn release_holds(&mut self) {
        let now = Instant::now();
        for c in &mut self.clients {
            match c.hold {
                Hold::Paused(until) if now >= until => {
                    signal(&c.child, libc::SIGCONT);
                    c.hold = Hold::Running;
                }
                Hold::TimingOut(until) if now >= until => {
                    c.expect = Expect::Anything;
                    signal(&c.child, libc::SIGKILL);
                    c.hold = Hold::Running;
                }
                Hold::Running if now >= c.leave_at && c.expect == Expect::Success => {
                    c.expect = Expect::Anything;
                    signal(&c.child, libc::SIGKILL);
                }
                _ => {}
            }
        }
    }

    /// Each running client, each tick (about 10 a second), may be stopped, moved, paused or
    /// left to time out: per second about 2%, 3%, 2% and 1%.
    fn disturb_clients(&mut self) {
        let mut seeks = Vec::new();
        for c in &mut self.clients {
            if c.hold != Hold::Running || c.expect != Expect::Success {
                continue;
            }
            let roll: f64 = self.rng.random();
            if roll < 0.002 {
                c.expect = Expect::Anything;
                signal(&c.child, libc::SIGKILL);
                self.actions.stops += 1;
            } else if roll < 0.005 {
                c.expect = Expect::Anything;
                signal(&c.child, libc::SIGKILL);
                seeks.push(c.title.clone());
                self.actions.seeks += 1;
            } else if roll < 0.007 {
                // Shorter than the session timeout and the client's resume delay together:
                // the client continues where it was.
                signal(&c.child, libc::SIGSTOP);
                c.hold = Hold::Paused(
                    Instant::now() + Duration::from_millis(self.rng.random_range(500..2500)),
                );
                self.actions.pauses += 1;
            } else if roll < 0.008 {
                signal(&c.child, libc::SIGSTOP);
                c.hold =
                    Hold::TimingOut(Instant::now() + Duration::from_millis(SESSION_TIMEOUT_MS * 2));
                self.actions.timeouts += 1;
            }
        }
        for title in seeks {
            if let Err(e) = self.start_client(Some(title)) {
                self.error(format!("restarting a client after a seek: {e:#}"));
            }
        }
    }

    fn upload_and_delete(&mut self) {
        self.next_upload += 1;
        let name = format!("upload-{}.ts", self.next_upload);
        let file = self.upload_file.clone();
        let r = run_ok(
            self.ns
                .command(&self.exe)
                .arg("ingest")
                .arg(&file)
                .args(["--name", &name, "--server", BASE]),
        );
        match r {
            Ok(()) => {
                self.actions.uploads += 1;
                self.uploads.push_back(name);
            }
            Err(e) => self.error(format!("upload of {name}: {e:#}")),
        }
        if self.uploads.len() > MAX_UPLOADS {
            let Some(old) = self.uploads.pop_front() else {
                return;
            };
            for c in self.clients.iter_mut().filter(|c| c.title == old) {
                c.expect = Expect::Anything;
            }
            match run_ok(
                self.ns
                    .command(&self.exe)
                    .args(["rm", &old, "--force", "--server", BASE]),
            ) {
                Ok(()) => self.actions.deletes += 1,
                Err(e) => self.error(format!("delete of {old}: {e:#}")),
            }
        }
    }

    fn broadcast(&mut self) {
        if !self.broadcasts.is_empty() && self.rng.random_bool(0.3) {
            let id = self
                .broadcasts
                .swap_remove(self.rng.random_range(0..self.broadcasts.len()));
            // 204, or 404 when it ended by itself meanwhile.
            match self.curl(&[
                "-o",
                "/dev/null",
                "-X",
                "DELETE",
                &format!("{BASE}/v1/broadcasts/{id}"),
            ]) {
                Ok(204) => self.actions.broadcasts_stopped += 1,
                Ok(404) => {}
                Ok(code) => self.error(format!("stopping broadcast {id}: HTTP {code}")),
                Err(e) => self.error(format!("stopping broadcast {id}: {e:#}")),
            }
        }
        let i = self.rng.random_range(0..self.titles.len().max(1));
        let Some(title) = self.titles.get(i).cloned() else {
            return;
        };
        let body = serde_json::json!({
            "object": title,
            "scheme": "cautious-harmonic",
            "max_wait_s": 5.0,
            "duration_s": self.rng.random_range(5.0..20.0),
        })
        .to_string();
        let out = self.dir.path().join("broadcast.json");
        let r = self.curl(&[
            "-o",
            &out.display().to_string(),
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &body,
            &format!("{BASE}/v1/broadcasts"),
        ]);
        match r {
            Ok(201) => {
                self.actions.broadcasts_started += 1;
                let id = std::fs::read_to_string(&out)
                    .ok()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                    .and_then(|v| {
                        v.get("id")
                            .map(|id| id.to_string().trim_matches('"').to_string())
                    });
                match id {
                    Some(id) => self.broadcasts.push(id),
                    None => self.error("a started broadcast's answer has no id".into()),
                }
            }
            Ok(503) => self.actions.broadcasts_refused += 1,
            Ok(code) => self.error(format!("starting a broadcast of {title}: HTTP {code}")),
            Err(e) => self.error(format!("starting a broadcast of {title}: {e:#}")),
        }
    }

    /// Runs curl inside the namespace (at most 10 s); returns the HTTP status.
    fn curl(&self, args: &[&str]) -> anyhow::Result<u16> {
        let out = self
            .ns
            .command(Path::new("curl"))
            .args(["-s", "--max-time", "10", "-w", "%{http_code}"])
            .args(args)
            .output()
            .context("running curl (install curl)")?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("reading curl's status code")
    }

    /// Stops every client and the server; returns what was done and the errors.
    pub(super) fn finish(mut self) -> (Actions, Vec<String>, u64) {
        for c in &mut self.clients {
            signal(&c.child, libc::SIGKILL);
            let _ = c.child.wait();
        }
        self.clients.clear();
        drop(self.server.take());
        (
            std::mem::take(&mut self.actions),
            std::mem::take(&mut self.errors),
            self.error_count,
        )
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid, which has not been reaped (we hold its Child).
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

fn gen_ts(
    exe: &Path,
    file: &Path,
    bitrate_bps: u64,
    seconds: u64,
    seed: u64,
) -> anyhow::Result<()> {
    run_ok(
        Command::new(exe)
            .args([
                "gen-ts",
                "--bitrate",
                &bitrate_bps.to_string(),
                "--duration",
                &seconds.to_string(),
            ])
            .args(["--seed", &seed.to_string()])
            .arg(file),
    )
}

/// Runs `cmd` to its end (bounded by the commands' own timeouts); fails with its stderr.
fn run_ok(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
