//! Issue 17, running as a service: `packaging/isnode.service` started with its own command
//! line (binary and paths moved into a temporary directory), its systemd notifications
//! (READY, RELOADING, STOPPING) read from a `NOTIFY_SOCKET` of ours, its `ExecReload` run
//! as written; the hardening it promises; and `isnode config default` / `config check`.

mod serve_support;

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_support::*;

const UNIT: &str = include_str!("../../../packaging/isnode.service");
const CONFIG: &str = include_str!("../../../packaging/isnode.toml");

/// The value of `key=` in the unit (first occurrence).
fn unit_value(key: &str) -> &'static str {
    UNIT.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("packaging/isnode.service has no {key}="))
}

/// Waits (bounded) for a notification containing `what` on `sock`; the text received.
#[track_caller]
fn expect_notify(sock: &UnixDatagram, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {what} notification within 20 s");
        sock.set_read_timeout(Some(left)).unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            if text.lines().any(|l| l == what) {
                return text;
            }
        }
    }
}

#[test]
fn the_unit_is_hardened_and_notifies() {
    assert_eq!(unit_value("Type"), "notify");
    assert_eq!(unit_value("ProtectSystem"), "strict");
    assert_eq!(unit_value("ReadWritePaths"), "/var/lib/isnode");
    assert_eq!(unit_value("NoNewPrivileges"), "yes");
    assert_eq!(unit_value("PrivateTmp"), "yes");
    assert_eq!(unit_value("User"), "isnode");
    assert!(unit_value("ExecReload").contains("-HUP $MAINPID"));
    assert!(unit_value("ExecStart").contains("--volume /var/lib/isnode"));
}

#[test]
fn the_unit_command_line_starts_reloads_and_drains() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("isnode.toml");
    let listen = format!("listen = \"127.0.0.1:{port}\"");
    std::fs::write(
        &config,
        CONFIG.replace("listen = \"127.0.0.1:7878\"", &listen),
    )
    .unwrap();
    let volume = dir.path().join("volume");
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    // ExecStart, word by word, with the package's paths moved here.
    let exec = unit_value("ExecStart")
        .replace("/usr/bin/isnode", bin())
        .replace("/etc/isnode/isnode.toml", config.to_str().unwrap())
        .replace("/var/lib/isnode", volume.to_str().unwrap());
    let mut words = exec.split_whitespace();
    let program = words.next().unwrap();
    let log = dir.path().join("serve.log");
    let mut child = std::process::Command::new(program)
        .args(words)
        .env("NOTIFY_SOCKET", &notify_path)
        .env_remove("ISNODE_VOLUME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    expect_notify(&notify, "READY=1");
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let r = http(addr, None, "GET", "/v1/objects", None, &[]);
    assert_eq!(r.status, 200, "{}", log_text());
    assert!(
        volume.is_dir(),
        "the volume of the unit's --volume was not created"
    );
    // ExecReload as written, $MAINPID being the server.
    let reload = unit_value("ExecReload").replace("$MAINPID", &child.id().to_string());
    let mut words = reload.split_whitespace();
    let status = std::process::Command::new(words.next().unwrap())
        .args(words)
        .status()
        .unwrap();
    assert!(status.success());
    expect_notify(&notify, "RELOADING=1");
    expect_notify(&notify, "READY=1");
    // systemctl stop: SIGTERM.
    // SAFETY: kill(2) on our child's pid has no memory effects.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    expect_notify(&notify, "STOPPING=1");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve did not stop within 20 s:\n{}", log_text());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}\n{}", log_text());
}

#[test]
fn config_default_is_the_shipped_file_and_config_check_names_the_line() {
    let out = command().args(["config", "default"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), CONFIG);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, CONFIG).unwrap();
    let out = command()
        .args(["config", "check", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "listen = \"127.0.0.1:1\"\n\nmax_sessions_per_clients = 3\n",
    )
    .unwrap();
    let out = command()
        .args(["config", "check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("max_sessions_per_clients") && err.contains("line 3"),
        "{err}"
    );
    std::fs::write(&bad, "# ok\nbroadcast_max_wait_s = -1.0\n").unwrap();
    let out = command()
        .args(["config", "check", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("broadcast_max_wait_s (line 2)"), "{err}");
}
