//! A network namespace of the benchmark's own behind a veth pair, and threads that enter it.
//!
//! [`VethNamespace::create`] makes a namespace `isnode-load-<pid>` (with `ip netns add`, so it
//! appears under `/var/run/netns`), a veth pair whose host side stays in the root namespace
//! with `10.201.X.1/24` and whose peer lives inside with `10.201.X.2/24` (X picked free),
//! both up, and `lo` up inside. Dropping it deletes the namespace, which destroys the pair.
//! [`VethNamespace::enter`] moves the calling thread (only it: `setns(2)` with
//! `CLONE_NEWNET` is per thread) into the namespace until the returned guard is dropped;
//! sockets that thread creates, and threads it spawns, belong to the namespace.
//!
//! What crosses the pair, as measured on this machine (kernel 6.x): a `UDP_SEGMENT` (GSO)
//! run of isnode packets crosses whole (veth forwards the GSO buffer) and a receiving socket
//! with `UDP_GRO` gets it whole (bench load's `pk/rx` column: 31 packets per receive call,
//! as on loopback), so no `ethtool -K ... gro` is needed; the default 1500-byte MTU carries
//! isnode's 1436-byte packets; strict `rp_filter` passes (each side has the route back);
//! `net.core.rmem_max`, which bounds `SO_RCVBUF`, is the same inside.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// Third octets tried for the pair's /24 (10.201.X.0/24), from one derived from the pid.
const SUBNET_TRIES: u32 = 64;

/// The namespace and its veth pair; torn down when dropped.
pub(crate) struct VethNamespace {
    name: String,
    host_if: String,
    peer_if: String,
    host_ip: String,
    peer_ip: String,
    ns_file: File,
}

/// Runs `ip` with `args`; fails with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running `ip` (iproute2 is needed for --net veth; `apt-get install iproute2`)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed ({}): {} (--net veth needs root; --net loopback does not)",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A third octet X such that no address of the machine is in 10.201.X.0/24.
fn free_subnet(pid: u32) -> anyhow::Result<u32> {
    let addrs = ip(&["-o", "-4", "addr", "show"])?;
    (0..SUBNET_TRIES)
        .map(|i| (pid + i) % 250 + 1)
        .find(|x| !addrs.contains(&format!(" 10.201.{x}.")))
        .context("no free 10.201.X.0/24 subnet for the veth pair")
}

impl VethNamespace {
    /// Creates the namespace and the pair (root and iproute2 needed).
    pub(crate) fn create() -> anyhow::Result<VethNamespace> {
        let pid = std::process::id();
        let name = format!("isnode-load-{pid}");
        let x = free_subnet(pid)?;
        ip(&["netns", "add", &name])?;
        // From here on, a failure drops `ns`, which deletes what was made.
        let ns_file = match File::open(format!("/var/run/netns/{name}")) {
            Ok(f) => f,
            Err(e) => {
                let _ = ip(&["netns", "del", &name]);
                return Err(e).context("opening the namespace");
            }
        };
        let ns = VethNamespace {
            host_if: format!("isl{pid}h"),
            peer_if: format!("isl{pid}p"),
            host_ip: format!("10.201.{x}.1"),
            peer_ip: format!("10.201.{x}.2"),
            name,
            ns_file,
        };
        ns.wire()?;
        Ok(ns)
    }

    fn wire(&self) -> anyhow::Result<()> {
        let (n, peer_if) = (self.name.as_str(), self.peer_if.as_str());
        ip(&[
            "link",
            "add",
            &self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            peer_if,
            "netns",
            n,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.host_ip),
            "dev",
            &self.host_if,
        ])?;
        ip(&["link", "set", &self.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut a = vec!["-n", n];
            a.extend_from_slice(args);
            ip(&a)
        };
        inside(&["link", "set", "lo", "up"])?;
        inside(&[
            "addr",
            "add",
            &format!("{}/24", self.peer_ip),
            "dev",
            peer_if,
        ])?;
        inside(&["link", "set", peer_if, "up"])?;
        Ok(())
    }

    /// The namespace's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The address of the host side (the servers listen there).
    pub(crate) fn host_ip(&self) -> &str {
        &self.host_ip
    }

    /// The address inside the namespace (the receivers').
    pub(crate) fn peer_ip(&self) -> &str {
        &self.peer_ip
    }

    /// Moves the calling thread into the namespace until the guard is dropped.
    pub(crate) fn enter(&self) -> anyhow::Result<Entered> {
        let home = File::open("/proc/thread-self/ns/net").context("opening this thread's netns")?;
        set_netns(&self.ns_file).context("entering the benchmark's namespace")?;
        Ok(Entered { home })
    }
}

impl Drop for VethNamespace {
    fn drop(&mut self) {
        // Deleting the namespace destroys the peer, and with it the pair.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

/// A thread inside the namespace; dropping it brings the thread back where it was.
pub(crate) struct Entered {
    home: File,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Err(e) = set_netns(&self.home) {
            // A thread left in the namespace would create its later sockets there.
            eprintln!("bench load: could not leave the namespace: {e}");
        }
    }
}

fn set_netns(f: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) on an open namespace file descriptor; it affects this thread only.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
