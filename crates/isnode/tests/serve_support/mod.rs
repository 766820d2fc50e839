//! Helpers of the serve end-to-end tests (`serve_e2e.rs`): volumes made with the real
//! binary, an `isnode serve` child that is killed when dropped, a hand-written HTTP/1.1
//! client (so a test can choose the TCP source address), metrics parsing and UDP receivers.
//!
//! Everything is bounded: every wait has a deadline, every socket a timeout.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) mod browser;
pub(crate) mod fills;
pub(crate) mod front;
pub(crate) mod garage;
pub(crate) mod media;
pub(crate) mod netns;
pub(crate) mod planned;
pub(crate) mod stalling_origin;

/// `volume create` flags for small codewords and blocks (4 members, k = 12, m = 4, 64 KiB
/// blocks), so that a few seconds of video fill many blocks.
pub(crate) const SMALL_SHAPE: &[&str] = &[
    "--members",
    "4",
    "--source-symbols",
    "12",
    "--repair-symbols",
    "4",
    "--block-size",
    "65536",
];

/// The binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_isnode")
}

/// A command for the binary, isolated from the caller's environment.
pub(crate) fn command() -> Command {
    let mut cmd = Command::new(bin());
    cmd.env_remove("ISNODE_CRASH_POINT")
        .env_remove("ISNODE_VOLUME")
        .env_remove("ISNODE_BUFFERED_IO")
        .env_remove("ISNODE_FAULT")
        .env_remove("RUST_LOG");
    cmd
}

/// Runs the binary with `args` and panics unless it succeeds; returns stdout.
#[track_caller]
/// Writes a constant-bitrate MPEG-TS stream of `seconds` at `bitrate` to `file` with
/// `isnode gen-ts` (the same `seed`, the same bytes).
pub(crate) fn gen_ts(file: &Path, bitrate: u64, seconds: f64, seed: u64) {
    run_ok(&[
        "gen-ts",
        "--bitrate",
        &bitrate.to_string(),
        "--duration",
        &seconds.to_string(),
        "--seed",
        &seed.to_string(),
        file.to_str().unwrap(),
    ]);
}

pub(crate) fn run_ok(args: &[&str]) -> String {
    let out = command()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running isnode {args:?}: {e}"));
    assert!(
        out.status.success(),
        "isnode {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `isnode ingest --encrypt --name NAME FILE`, which must succeed.
#[track_caller]
pub(crate) fn ingest_encrypted(vol: &Vol, name: &str, file: &Path) {
    let file = file.to_str().expect("a UTF-8 path");
    let out = isnode(vol, &["ingest", "--encrypt", "--name", name, file]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Runs `isnode --volume VOL ARGS...` to its end, whatever its outcome.
pub(crate) fn isnode(vol: &Vol, args: &[&str]) -> std::process::Output {
    command()
        .arg("--volume")
        .arg(&vol.root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running isnode {args:?}: {e}"))
}

/// A command's stdout then stderr, as text (for failure messages).
pub(crate) fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `isnode token add --role ROLE`: the token.
pub(crate) fn token(vol: &Vol, name: &str, role: &str) -> String {
    let out = isnode(vol, &["token", "add", "--name", name, "--role", role]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `clear` ingested encrypted as `name` and broadcast (cautious harmonic) by a server on
/// `vol`; `isnode play --broadcast` without a token must fail naming the viewer role and
/// write nothing (never ciphertext), then with a viewer token succeed: what it wrote. Run
/// it inside a namespace with loopback multicast (`netns::Netns`).
pub(crate) fn encrypted_broadcast_output(vol: &Vol, clear: &Path, name: &str) -> Vec<u8> {
    let clear = clear.to_str().expect("a UTF-8 path");
    let ingest = isnode(vol, &["ingest", "--encrypt", "--name", name, clear]);
    assert!(ingest.status.success(), "{}", text(&ingest));
    let viewer = token(vol, "v", "viewer");
    let operator = token(vol, "o", "operator");
    let server = Server::start(vol, &[]);
    let body =
        format!(r#"{{"object": "{name}", "scheme": "cautious-harmonic", "max_wait_s": 10.0}}"#);
    let auth = format!("Bearer {operator}");
    let headers = [("Authorization", auth.as_str())];
    let r = http(
        server.addr,
        None,
        "POST",
        "/v1/broadcasts",
        Some(&body),
        &headers,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let out_path = vol.path(&format!("broadcast-{name}"));
    let play = |extra: &[&str]| {
        command()
            .args(["play", name, "--broadcast", "--server", &server.url()])
            .arg("--out")
            .arg(&out_path)
            .args(["--max-seconds", "40"])
            .args(extra)
            .output()
            .expect("running isnode play --broadcast")
    };
    let out = play(&[]);
    let msg = text(&out);
    assert!(!out.status.success(), "played without a token: {msg}");
    assert!(
        msg.contains("viewer role") && msg.contains("encrypted"),
        "{msg}"
    );
    let written = std::fs::metadata(&out_path).map_or(0, |m| m.len());
    assert_eq!(written, 0, "{msg}");
    let out = play(&["--token", &viewer]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::read(&out_path).expect("the broadcast's output")
}

/// A child process killed (and reaped) when dropped.
pub(crate) struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Waits for the child until `deadline`; kills it and panics if it is still running.
    #[track_caller]
    pub(crate) fn wait_until(&mut self, deadline: Instant, what: &str) -> std::process::ExitStatus {
        let child = self.0.as_mut().expect("child already reaped");
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                self.0 = None;
                return st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.0 = None;
                panic!("{what}: still running at its deadline (killed)");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A temporary directory with a volume in `vol/` and generated inputs in `in/`.
pub(crate) struct Vol {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// The volume directory.
    pub root: PathBuf,
}

impl Vol {
    /// Creates a volume with `isnode volume create` and `extra` flags.
    pub(crate) fn create(extra: &[&str]) -> Vol {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("vol");
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        let root_s = root.to_str().unwrap().to_string();
        let mut args = vec!["volume", "create", "--volume", root_s.as_str()];
        args.extend_from_slice(extra);
        run_ok(&args);
        Vol { dir, root }
    }

    /// Generates a constant-bitrate MPEG-TS stream with `isnode gen-ts`, ingests it as
    /// `name` (bitrate detected from the PCR) and returns its bytes.
    pub(crate) fn add_ts(&self, name: &str, bitrate: u64, seconds: f64, seed: u64) -> Vec<u8> {
        let file = self.dir.path().join("in").join(name);
        let f = file.to_str().unwrap();
        gen_ts(&file, bitrate, seconds, seed);
        run_ok(&[
            "ingest",
            "--volume",
            self.root.to_str().unwrap(),
            "--name",
            name,
            f,
        ]);
        std::fs::read(&file).unwrap()
    }

    /// Ingests the file at `file` as `name` (bitrate probed from the container) and returns
    /// its bytes.
    pub(crate) fn add_file(&self, name: &str, file: &Path) -> Vec<u8> {
        run_ok(&[
            "ingest",
            "--volume",
            self.root.to_str().unwrap(),
            "--name",
            name,
            file.to_str().unwrap(),
        ]);
        std::fs::read(file).unwrap()
    }

    /// A path for a scratch file in the temporary directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Bytes of the volume's segment files at `root` (what `du` reads of them).
pub(crate) fn segment_bytes(root: &Path) -> u64 {
    let mut sum = 0;
    for member in std::fs::read_dir(root.join("members"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let objects = member.path().join("objects");
        for f in std::fs::read_dir(&objects).into_iter().flatten().flatten() {
            sum += f.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    sum
}

/// A free TCP port on 127.0.0.1, free when asked and never handed out twice by this process.
///
/// Ports come from 20000..32000, below Linux's ephemeral range (32768..61000): a port the
/// kernel picked for `bind(0)` and we then released can be picked again at once for another
/// test's listener or for any outgoing connection (Garage nodes connect to each other), and a
/// node of one cluster then answers another cluster's handshakes. A counter starting at a
/// point drawn from the process id walks the range; a port something else holds is skipped.
pub(crate) fn free_port() -> u16 {
    free_port_on(IpAddr::from([127, 0, 0, 1]))
}

/// [`free_port`] on `ip` (`::1` in a namespace without IPv4, say).
pub(crate) fn free_port_on(ip: IpAddr) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(2_654_435_761)) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        let tcp = std::net::TcpListener::bind((ip, port));
        let udp = std::net::UdpSocket::bind((ip, port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000 on {ip}");
}

/// An `isnode serve` child on 127.0.0.1, killed when dropped.
pub(crate) struct Server {
    child: ChildGuard,
    /// The control API address.
    pub addr: SocketAddr,
    /// Its standard error (the log).
    pub log: PathBuf,
    /// The secrets of the sessions created through [`Server::post_session`], by id.
    secrets: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Server {
    /// Starts `isnode serve --volume VOL --listen 127.0.0.1:PORT EXTRA...` on a free port and
    /// waits (bounded) until `GET /v1/objects` answers 200.
    pub(crate) fn start(vol: &Vol, extra: &[&str]) -> Server {
        Server::start_env(vol, extra, &[])
    }

    /// [`Server::start`] with extra environment variables for the server.
    pub(crate) fn start_env(vol: &Vol, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_limited(vol, extra, env, None)
    }

    /// [`Server::start_env`] under an open files limit of `nofile` (soft and hard), if
    /// given.
    pub(crate) fn start_limited(
        vol: &Vol,
        extra: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Server {
        for attempt in 0..5 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            if let Some(server) = Server::spawn_on(vol, addr, extra, env, nofile, attempt < 4) {
                return server;
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// [`Server::start_on`] at a given address (an IPv6 one, say); panics if it is taken.
    pub(crate) fn start_on_addr(vol: &Vol, addr: SocketAddr, extra: &[&str]) -> Server {
        Server::spawn_on(vol, addr, extra, &[], None, false).expect("spawn_on panics instead")
    }

    /// [`Server::start`] listening on `ip` (an IPv6 address, say).
    pub(crate) fn start_at(vol: &Vol, ip: IpAddr, extra: &[&str]) -> Server {
        Server::start_at_env(vol, ip, extra, &[])
    }

    /// [`Server::start_at`] with extra environment variables for the server.
    pub(crate) fn start_at_env(
        vol: &Vol,
        ip: IpAddr,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        for attempt in 0..5 {
            let addr = SocketAddr::new(ip, free_port_on(ip));
            if let Some(server) = Server::spawn_on(vol, addr, extra, env, None, attempt < 4) {
                return server;
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// [`Server::start_env`] on a given port (a cluster's node list names its nodes' ports
    /// before they start); panics if the port is taken.
    pub(crate) fn start_on(vol: &Vol, port: u16, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        Server::spawn_on(vol, addr, extra, env, None, false).expect("spawn_on panics instead")
    }

    /// Starts the server on `port` and waits for it; `None` if the port was taken and
    /// `retry` allows another.
    fn spawn_on(
        vol: &Vol,
        addr: SocketAddr,
        extra: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u64>,
        retry: bool,
    ) -> Option<Server> {
        let log = vol.path(&format!("serve-{}.log", addr.port()));
        let mut cmd = command();
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .arg("serve")
            .arg("--volume")
            .arg(&vol.root)
            .arg("--listen")
            .arg(addr.to_string())
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning isnode serve");
        let mut server = Server {
            child: ChildGuard(Some(child)),
            addr,
            log,
            secrets: Default::default(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let exited = server
                .child
                .0
                .as_mut()
                .unwrap()
                .try_wait()
                .unwrap()
                .is_some();
            if exited {
                let text = server.log_text();
                server.child.0 = None;
                if text.contains("in use") && retry {
                    return None; // the port was taken meanwhile: try another
                }
                panic!("isnode serve exited at start:\n{text}");
            }
            if let Ok(r) = try_http(addr, None, "GET", "/v1/objects", None, &[]) {
                // 401: answering, and closed to anonymous viewers.
                if r.status == 200 || r.status == 401 {
                    return Some(server);
                }
            }
            // An HTTPS server does not answer plain HTTP: it says when it listens.
            if server
                .log_text()
                .contains("isnode serve: listening on https://")
            {
                return Some(server);
            }
            assert!(
                Instant::now() < deadline,
                "isnode serve did not answer within 20 s:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the server to exit by itself until `deadline` (panics, killing it, if
    /// it is still running then).
    #[track_caller]
    pub(crate) fn wait_exit(&mut self, deadline: Instant) -> std::process::ExitStatus {
        self.child.wait_until(deadline, "isnode serve")
    }

    /// `kill -9` of the server, reaped.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The base URL of the control API.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's log so far.
    pub(crate) fn log_text(&self) -> String {
        // Lossy: a log with a byte that is not UTF-8 still shows (and still matches).
        match std::fs::read(&self.log) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => format!(
                "(the server's log {} cannot be read: {e})",
                self.log.display()
            ),
        }
    }

    /// A request from 127.0.0.1.
    pub(crate) fn req(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        http(self.addr, None, method, path, body, &[])
    }

    /// `POST /v1/sessions` for `object` at `port`, from 127.0.0.1 (the session's secret is
    /// kept for [`Server::session_req`]). The stream starts once validated
    /// ([`Server::validate`]).
    pub(crate) fn post_session(&self, object: &str, port: u16) -> Resp {
        let body = serde_json::json!({ "object": object, "port": port }).to_string();
        let r = self.req("POST", "/v1/sessions", Some(&body));
        self.remember(&r);
        r
    }

    /// Keeps the secret of the session a `201` answer `r` created (for
    /// [`Server::session_req`]).
    pub(crate) fn remember(&self, r: &Resp) {
        if r.status == 201 {
            let v = r.json();
            if let (Some(id), Some(secret)) = (v["id"].as_str(), v["secret"].as_str()) {
                self.secrets
                    .lock()
                    .unwrap()
                    .insert(id.to_string(), secret.to_string());
            }
        }
    }

    /// A streaming session of `object` to `sock`: created ([`Server::post_session`], which
    /// must answer 201) and validated ([`Server::validate`]); the session answer.
    #[track_caller]
    pub(crate) fn open_session(&self, object: &str, sock: &UdpSocket) -> Value {
        let r = self.post_session(object, sock.local_addr().unwrap().port());
        assert_eq!(r.status, 201, "POST /v1/sessions: {}", r.body);
        let info = r.json();
        self.validate(&info, sock);
        info
    }

    /// Return routability as a client does it: the token datagram the server sent to
    /// `sock`, echoed with `POST /v1/sessions/{id}/validate` (must answer 204).
    #[track_caller]
    pub(crate) fn validate(&self, info: &Value, sock: &UdpSocket) {
        self.validate_from(info, sock, None)
    }

    /// [`Server::validate`] with the echo from `from` (the session's creator; default
    /// 127.0.0.1).
    #[track_caller]
    pub(crate) fn validate_from(&self, info: &Value, sock: &UdpSocket, from: Option<IpAddr>) {
        let server_ip = self.addr.ip();
        let token = isnode_recv::validate::await_token(sock, Duration::from_secs(5), |from| {
            from.ip() == server_ip
        })
        .expect("the token datagram");
        let id = info["id"].as_str().expect("a session id");
        let body = serde_json::json!({ "token": isnode_proto::auth::key_hex(&token) });
        let r = self.session_req_from(from, "POST", id, "/validate", Some(&body.to_string()));
        assert_eq!(r.status, 204, "validating session {id}: {}", r.body);
    }

    /// A request on `/v1/sessions/{id}{suffix}` from 127.0.0.1 with the session's secret
    /// (as recorded by [`Server::post_session`]).
    pub(crate) fn session_req(
        &self,
        method: &str,
        id: &str,
        suffix: &str,
        body: Option<&str>,
    ) -> Resp {
        self.session_req_from(None, method, id, suffix, body)
    }

    /// [`Server::session_req`] from `from` (default 127.0.0.1).
    pub(crate) fn session_req_from(
        &self,
        from: Option<IpAddr>,
        method: &str,
        id: &str,
        suffix: &str,
        body: Option<&str>,
    ) -> Resp {
        let secret = self
            .secrets
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default();
        let path = format!("/v1/sessions/{id}{suffix}");
        http(
            self.addr,
            from,
            method,
            &path,
            body,
            &[("Isnode-Session-Secret", &secret)],
        )
    }

    /// `POST /v1/sessions/{id}/keepalive` with the session's secret; the status.
    pub(crate) fn keepalive(&self, id: &str) -> u16 {
        self.session_req("POST", id, "/keepalive", None).status
    }

    /// `GET /metrics`.
    pub(crate) fn metrics(&self) -> Metrics {
        let r = self.req("GET", "/metrics", None);
        assert_eq!(r.status, 200, "GET /metrics: {}", r.body);
        Metrics(r.body)
    }

    /// VmRSS of the server process, in bytes.
    pub(crate) fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("reading the server's /proc status");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS line");
        let kb: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("VmRSS value");
        kb * 1024
    }
}

/// The text of `GET /metrics`.
pub(crate) struct Metrics(pub String);

impl Metrics {
    /// The value of the series `name` (with its labels, e.g. `x_total{member="2"}`), or 0
    /// if absent.
    pub(crate) fn get(&self, series: &str) -> f64 {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                (k == series).then(|| v.parse().ok()).flatten()
            })
            .unwrap_or(0.0)
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body, decoded.
    pub body: String,
}

impl Resp {
    /// The body as JSON (panics with the body if it is not JSON).
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("answer {} is not JSON ({e}): {:?}", self.status, self.body))
    }

    /// A header's value.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request over a fresh TCP connection, from `from` (an IP to bind the client
/// side to; default the kernel's choice: the loopback for a loopback server), with extra
/// headers. Panics on a transport error.
#[track_caller]
pub(crate) fn http(
    server: SocketAddr,
    from: Option<IpAddr>,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Resp {
    try_http(server, from, method, path, body, headers)
        .unwrap_or_else(|e| panic!("{method} {path} to {server}: {e}"))
}

/// Like [`http`], but returns transport errors.
pub(crate) fn try_http(
    server: SocketAddr,
    from: Option<IpAddr>,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> std::io::Result<Resp> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(server), Type::STREAM, None)?;
    if let Some(from) = from {
        sock.bind(&SocketAddr::new(from, 0).into())?;
    }
    sock.connect_timeout(&server.into(), Duration::from_secs(5))?;
    let mut stream: TcpStream = sock.into();
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let body = body.unwrap_or("");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw).ok_or_else(|| {
        std::io::Error::other(format!(
            "bad HTTP answer: {:?}",
            String::from_utf8_lossy(&raw)
        ))
    })
}

fn parse_response(raw: &[u8]) -> Option<Resp> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_s = std::str::from_utf8(&rest[..eol]).ok()?;
            let size = usize::from_str_radix(size_s.split(';').next()?.trim(), 16).ok()?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
        body = out;
    }
    Some(Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A UDP socket bound to `ip` (port 0: ephemeral) with a large receive buffer and a short
/// read timeout.
pub(crate) fn udp(ip: IpAddr, port: u16) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SocketAddr::new(ip, port).into())?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    Ok(s)
}

/// 127.0.0.1.
pub(crate) const LO1: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
/// 127.0.0.2 (also local on Linux loopback).
pub(crate) const LO2: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// Receives on `sock` from a thread until `stop`, recording each datagram's arrival time
/// (seconds since `t0`) and length.
pub(crate) struct Recorder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<(f64, usize)>>>,
}

impl Recorder {
    /// Starts recording.
    pub(crate) fn start(sock: UdpSocket, t0: Instant) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65536];
            // Bounded even if nobody stops it.
            let end = Instant::now() + Duration::from_secs(60);
            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                if let Ok(n) = sock.recv(&mut buf) {
                    got.push((t0.elapsed().as_secs_f64(), n));
                }
            }
            got
        });
        Recorder {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops and returns what arrived.
    pub(crate) fn finish(mut self) -> Vec<(f64, usize)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().expect("recorder thread")
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads and discards whatever is queued on `sock` now; returns the datagrams read.
pub(crate) fn drain(sock: &UdpSocket) -> usize {
    let mut buf = vec![0u8; 65536];
    sock.set_nonblocking(true).unwrap();
    let mut n = 0;
    while sock.recv(&mut buf).is_ok() {
        n += 1;
    }
    sock.set_nonblocking(false).unwrap();
    n
}

/// Counts the datagrams arriving at `sock` during `dur`.
pub(crate) fn count_for(sock: &UdpSocket, dur: Duration) -> usize {
    let mut buf = vec![0u8; 65536];
    let end = Instant::now() + dur;
    let mut n = 0;
    while Instant::now() < end {
        if sock.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    n
}

/// A deterministic xorshift generator for test-side loss.
pub(crate) struct Rng(pub u64);

impl Rng {
    /// A uniform number in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Truncates every segment file of the member directory `dir` to 0 bytes and renames the
/// directory away (to `dir` + ".failed"): see the member-loss test for why both.
pub(crate) fn fail_member(dir: &Path) -> usize {
    let mut truncated = 0;
    if let Ok(entries) = std::fs::read_dir(dir.join("objects")) {
        for e in entries.flatten() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(e.path())
                .expect("opening a segment file");
            f.set_len(0).expect("truncating a segment file");
            truncated += 1;
        }
    }
    let aside = PathBuf::from(format!("{}.failed", dir.display()));
    std::fs::rename(dir, &aside).expect("renaming the member away");
    truncated
}

/// What one `isnode play` run left.
pub(crate) struct Played {
    /// Its exit status.
    pub status: std::process::ExitStatus,
    /// Its standard error (the summary, the log).
    pub log: String,
    /// Its `--stats-json`.
    pub stats: Value,
    /// Its output file.
    pub out: PathBuf,
}

impl Played {
    /// The output's bytes.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.out).expect("reading play's output")
    }
}

/// Runs `isnode play NAME --server URL --out TAG.out --stats-json TAG.json EXTRA...` to its
/// end (bounded by `deadline`), whatever its outcome.
#[track_caller]
pub(crate) fn play_run(
    server: &Server,
    vol: &Vol,
    name: &str,
    tag: &str,
    extra: &[&str],
    deadline: Instant,
) -> Played {
    let out = vol.path(&format!("{tag}.out"));
    let stats = vol.path(&format!("{tag}.json"));
    let stderr = vol.path(&format!("{tag}.stderr"));
    let mut child = ChildGuard(Some(
        command()
            .args(["play", name, "--server", &server.url()])
            .arg("--out")
            .arg(&out)
            .arg("--stats-json")
            .arg(&stats)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning isnode play"),
    ));
    let status = child.wait_until(deadline, "isnode play");
    let log = std::fs::read_to_string(&stderr).unwrap_or_default();
    let stats = serde_json::from_slice(&std::fs::read(&stats).unwrap_or_default())
        .unwrap_or_else(|e| panic!("stats JSON ({e}); isnode play ({tag}): {status}\n{log}"));
    Played {
        status,
        log,
        stats,
        out,
    }
}

/// [`play_run`], which must succeed; its statistics and output.
#[track_caller]
pub(crate) fn play_to_end(
    server: &Server,
    vol: &Vol,
    name: &str,
    tag: &str,
    extra: &[&str],
    deadline: Instant,
) -> (Value, Vec<u8>) {
    let p = play_run(server, vol, name, tag, extra, deadline);
    assert!(
        p.status.success(),
        "isnode play ({tag}): {}\n{}",
        p.status,
        p.log
    );
    let bytes = p.bytes();
    (p.stats, bytes)
}

/// A tmpfs mounted by a test, unmounted when dropped (even when the test panics).
pub(crate) struct TmpfsMount(PathBuf);

impl TmpfsMount {
    /// Mounts a tmpfs of `size` (as mount(8) takes it: `700k`, `4m`) at `dir`; panics,
    /// saying what it needs, if it cannot (a test that cannot run fails).
    #[track_caller]
    pub(crate) fn mount(dir: &Path, size: &str) -> TmpfsMount {
        std::fs::create_dir_all(dir).expect("making the mount point");
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status();
        match st {
            Ok(s) if s.success() => TmpfsMount(dir.to_path_buf()),
            other => panic!(
                "mounting a tmpfs at {} failed ({other:?}): this test needs `mount` \
                 (util-linux) and the right to mount (root with CAP_SYS_ADMIN)",
                dir.display()
            ),
        }
    }

    /// Gives the file system `size` (frees space, keeping its files).
    #[track_caller]
    pub(crate) fn resize(&self, size: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status();
        assert!(
            st.as_ref().is_ok_and(|s| s.success()),
            "remounting {} with size {size}: {st:?}",
            self.0.display()
        );
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Sends `GET path` to `server` from `from` (an address of the test's own) and returns the
/// connection without reading the answer.
pub(crate) fn send_get(server: SocketAddr, from: IpAddr, path: &str) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(server), Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(from, 0).into()).unwrap();
    sock.connect_timeout(&server.into(), Duration::from_secs(5))
        .unwrap();
    let mut s: TcpStream = sock.into();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s
}
