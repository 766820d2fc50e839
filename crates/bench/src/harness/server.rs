//! Starting `isnode serve` for a benchmark, and stopping it when the benchmark drops it.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cgroup::Cgroup;

/// How long a server (or a process serving one) has to answer after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How often it is asked meanwhile.
const READY_POLL: Duration = Duration::from_millis(100);

/// A server child process, sent SIGTERM (then killed after 5 s) when dropped.
pub(crate) struct ServerChild(pub(crate) Child);

impl Drop for ServerChild {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM)
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the server's own output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Its stderr on the benchmark's (stdout discarded, stdin inherited).
    Stderr,
    /// Nowhere (stdin, stdout and stderr null): the benchmark's own output stays readable.
    Silent,
}

/// How the server reads its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockIo {
    /// As the environment says (`ISNODE_BUFFERED_IO` passed on if set).
    FromEnvironment,
    /// O_DIRECT whatever the environment says (`ISNODE_BUFFERED_IO` removed): its reads
    /// really go to the disk.
    Direct,
}

/// What `isnode serve` to start.
pub(crate) struct ServerSpec<'a> {
    /// The `isnode` binary.
    pub(crate) exe: &'a Path,
    /// The volume it serves.
    pub(crate) volume: &'a Path,
    /// The address it listens on (a free port is picked).
    pub(crate) host: &'a str,
    /// `--engine`.
    pub(crate) engine: &'a str,
    /// `--cache-size`: its block pool, bytes.
    pub(crate) cache_size_bytes: u64,
    /// More arguments for `isnode serve`.
    pub(crate) extra: &'a [&'a str],
    /// The control group it runs in (its memory and disk limits), if any.
    pub(crate) group: Option<&'a Cgroup>,
    /// Where its output goes.
    pub(crate) output: Output,
    /// How it reads its blocks.
    pub(crate) block_io: BlockIo,
    /// HTTPS with this certificate and key (PEM files) instead of plain HTTP.
    pub(crate) tls: Option<(&'a Path, &'a Path)>,
    /// One more variable in its environment.
    pub(crate) env: Option<(&'a str, &'a str)>,
}

impl<'a> ServerSpec<'a> {
    /// `exe serve` of `volume` on `host` with `engine` and a pool of `cache_size_bytes`: no
    /// extra arguments, no group, its stderr shown, block reads as the environment says.
    pub(crate) fn new(
        exe: &'a Path,
        volume: &'a Path,
        host: &'a str,
        engine: &'a str,
        cache_size_bytes: u64,
    ) -> ServerSpec<'a> {
        ServerSpec {
            exe,
            volume,
            host,
            engine,
            cache_size_bytes,
            extra: &[],
            group: None,
            output: Output::Stderr,
            block_io: BlockIo::FromEnvironment,
            tls: None,
            env: None,
        }
    }
}

/// Starts the server of `spec`; returns it and its base URL once it answers.
pub(crate) fn start(spec: &ServerSpec) -> anyhow::Result<(ServerChild, String)> {
    let port = TcpListener::bind((spec.host, 0))?.local_addr()?.port();
    let listen: SocketAddr = format!("{}:{port}", spec.host).parse()?;
    let mut command = match spec.group {
        Some(g) => g.command(spec.exe),
        None => Command::new(spec.exe),
    };
    command
        .args([
            "--volume",
            &spec.volume.display().to_string(),
            "serve",
            "--listen",
            &listen.to_string(),
            "--engine",
            spec.engine,
        ])
        .args([
            "--max-bitrate",
            "1000000000000",
            "--max-sessions-per-client",
            "100000",
        ])
        .args(["--cache-size", &spec.cache_size_bytes.to_string()])
        .args(own_network_flags(spec.exe, listen, spec.tls.is_some()))
        .args(spec.extra);
    if let Some((cert, key)) = spec.tls {
        command
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key);
    }
    if let Some((k, v)) = spec.env {
        command.env(k, v);
    }
    if spec.block_io == BlockIo::Direct {
        command.env_remove("ISNODE_BUFFERED_IO");
    }
    match spec.output {
        Output::Stderr => command.stdout(Stdio::null()).stderr(Stdio::inherit()),
        Output::Silent => command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    };
    let child = command.spawn().context("starting isnode serve")?;
    let mut server = ServerChild(child);
    let base = match spec.tls {
        Some(_) => format!("https://{listen}"),
        None => format!("http://{listen}"),
    };
    let agent = agent(spec.tls.map(|(cert, _)| cert))?;
    let mut ended = None;
    let answered = answers_in_time(|| {
        if let Ok(Some(status)) = server.0.try_wait() {
            ended = Some(status);
            return true;
        }
        agent.get(format!("{base}/v1/objects")).call().is_ok()
    });
    if let Some(status) = ended {
        bail!(
            "isnode serve ended before it answered on {base}: {status}{}",
            ended_why(status, spec)
        );
    }
    if !answered {
        bail!("the server did not answer on {base} within 20 s");
    }
    Ok((server, base))
}

/// What a server's early end likely means: killed (SIGKILL) in a group with a memory
/// limit is the kernel's out-of-memory killer.
fn ended_why(status: std::process::ExitStatus, spec: &ServerSpec) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), spec.group) {
        (Some(libc::SIGKILL), Some(_)) => format!(
            " (killed: its group's memory limit is likely too small for its {} MiB pool \
             and the rest)",
            spec.cache_size_bytes >> 20
        ),
        _ => String::new(),
    }
}

/// The flags of a server on the bench's own network (a veth pair in a namespace, not
/// loopback): plain HTTP by choice (unless `tls`), and no role tokens (the bench is its
/// only client). A binary from before HTTPS serves plain HTTP anywhere, one from before
/// tokens opens the routes anyway: neither knows the flag, and neither gets it.
fn own_network_flags(exe: &Path, listen: SocketAddr, tls: bool) -> Vec<&'static str> {
    if listen.ip().is_loopback() {
        return Vec::new();
    }
    ["--plain-http", "--insecure-open-operator-routes"]
        .into_iter()
        .filter(|flag| !(tls && *flag == "--plain-http"))
        .filter(|flag| serve_knows(exe, flag))
        .collect()
}

/// An agent for a server's control API: trusting only the certificate in the PEM file
/// `ca_cert` when given (a server of the run's self-signed pair), else the defaults.
pub(crate) fn agent(ca_cert: Option<&Path>) -> anyhow::Result<ureq::Agent> {
    let Some(ca) = ca_cert else {
        return Ok(ureq::Agent::new_with_defaults());
    };
    let tls = isnode_recv::control::tls_config(Some(ca))?;
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .build()
        .new_agent())
}

/// Whether `exe serve` takes `flag` (its `--help` names it): before/after runs start
/// binaries older than some flags.
fn serve_knows(exe: &Path, flag: &str) -> bool {
    Command::new(exe)
        .args(["serve", "--help"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
}

/// Asks `answers` every 100 ms until it says yes or 20 s have passed; whether it said yes.
pub(crate) fn answers_in_time(mut answers: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if answers() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(READY_POLL);
    }
}
