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
        let ns = Netns::fresh();
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

    /// A fresh namespace whose loopback is up (and nothing else).
    fn fresh() -> Netns {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("isnode-t{}-{n}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `f` on a thread inside the namespace and returns what it returns (a panic in
    /// `f` is the caller's).
    pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(format!("/var/run/netns/{}", self.name)).expect("opening the netns");
        std::thread::scope(|scope| {
            let t = scope.spawn(move || {
                // SAFETY: a valid namespace file descriptor; affects this thread only.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            });
            match t.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
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

/// Namespaces on one Ethernet segment, IPv6 only: each member's `eth0` (a veth) is a port of
/// a bridge in a hub namespace of its own (multicast snooping off: the bridge floods
/// multicast to every port, as a switch with no querier does) and holds
/// `fd00:6272::N/64` (N = 1, 2, ...); no member has an IPv4 address, not even `127.0.0.1`
/// on its loopback. Every member reaches every other over IPv6, unicast and multicast
/// (`ff00::/8` routes out of `eth0`, the kernel's own route). Deleted when dropped.
pub(crate) struct Bridge {
    /// The members, in address order.
    pub members: Vec<Netns>,
    _hub: Netns,
}

impl Bridge {
    /// A bridge of `n` IPv6-only members.
    pub(crate) fn ipv6_only(n: usize) -> Bridge {
        let hub = Netns::fresh();
        ip(&["-n", &hub.name, "link", "add", "br0", "type", "bridge"]);
        ip(&[
            "-n",
            &hub.name,
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ]);
        ip(&["-n", &hub.name, "link", "set", "br0", "up"]);
        let members = (0..n).map(|i| Bridge::member(&hub, i)).collect();
        Bridge { members, _hub: hub }
    }

    /// Member `i`: a namespace whose `eth0` is a port of the hub's `br0`.
    fn member(hub: &Netns, i: usize) -> Netns {
        let m = Netns::fresh();
        ip(&["-n", &m.name, "addr", "del", "127.0.0.1/8", "dev", "lo"]);
        let port = format!("p{i}");
        ip(&[
            "-n", &hub.name, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &m.name,
        ]);
        ip(&["-n", &hub.name, "link", "set", &port, "master", "br0"]);
        ip(&["-n", &hub.name, "link", "set", &port, "up"]);
        let addr = format!("{}/64", Bridge::addr(i));
        ip(&[
            "-n", &m.name, "-6", "addr", "add", &addr, "dev", "eth0", "nodad",
        ]);
        ip(&["-n", &m.name, "link", "set", "eth0", "up"]);
        m
    }

    /// Member `i`'s address.
    pub(crate) fn addr(i: usize) -> std::net::IpAddr {
        let last = u16::try_from(i + 1).expect("a small bridge");
        std::net::IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0x6272, 0, 0, 0, 0, 0, last))
    }
}
