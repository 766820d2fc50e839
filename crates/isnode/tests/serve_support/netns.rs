//! A network namespace of the test's own, with multicast on its loopback, and threads that
//! run inside it (`setns(2)` is per thread; children spawned from such a thread and the
//! sockets it creates belong to the namespace). Deleted when dropped. Needs root and
//! iproute2 (`ip`): a test that cannot make one fails saying so.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The namespace; deleted when dropped.
pub(crate) struct Netns {
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running `ip` (iproute2; these tests need root)");
    assert!(
        out.status.success(),
        "`ip {}` failed: {} (these tests need root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Netns {
    /// A fresh namespace whose loopback is up, multicast-capable, and the routes of
    /// 224.0.0.0/4 and ff00::/8 (IPv4 and IPv6 multicast stay on the loopback).
    pub(crate) fn with_loopback_multicast() -> Netns {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("isnode-t{}-{n}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ip(&["-n", &ns.name, "link", "set", "lo", "multicast", "on"]);
        ip(&["-n", &ns.name, "route", "add", "224.0.0.0/4", "dev", "lo"]);
        ip(&[
            "-n",
            &ns.name,
            "-6",
            "route",
            "add",
            "multicast",
            "ff00::/8",
            "dev",
            "lo",
            "table",
            "local",
        ]);
        ns
    }

    /// Runs `f` on a thread inside the namespace and returns what it returns (a panic in
    /// `f` is the caller's).
    pub(crate) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let file = File::open(format!("/var/run/netns/{}", self.name)).expect("opening the netns");
        let t = std::thread::spawn(move || {
            // SAFETY: a valid namespace file descriptor; affects this thread only.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        });
        match t.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdin(Stdio::null())
            .output();
    }
}
