//! A 3-node Garage cluster on loopback (replication factor 3) for the origin tests: the
//! set-up of ../shared/notes/garage.md (node ids, connect, layout assign and apply, a bucket
//! and a key allowed to read and write it). Each node is a `garage server` child killed
//! when the cluster is dropped; every wait has a deadline.
//!
//! Garage is found on PATH or at `~/.cargo/bin/garage`; without it the test FAILS saying how
//! to install it (`bash scripts/install-garage`, which `scripts/test` runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, ChildGuard};

/// Nodes of the test cluster.
pub(crate) const NODES: usize = 3;
/// The S3 region the nodes answer SigV4 for.
pub(crate) const REGION: &str = "garage";
/// The bucket made at start.
pub(crate) const BUCKET: &str = "titles";

/// The garage binary, or a panic saying how to install it.
pub(crate) fn garage_bin() -> PathBuf {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join("garage");
            if p.is_file() {
                return p;
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cargo/bin/garage");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "garage is not installed (not on PATH nor at ~/.cargo/bin/garage): install it with \
         `bash scripts/install-garage` (scripts/test runs it; minutes, once per machine)"
    );
}

/// One Garage node.
pub(crate) struct GarageNode {
    child: ChildGuard,
    /// Its configuration file.
    pub config: PathBuf,
    /// Its S3 API address.
    pub s3: std::net::SocketAddr,
    /// Its log.
    pub log: PathBuf,
}

/// A running 3-node cluster with a bucket and a key.
pub(crate) struct Garage {
    /// Keeps the directories alive.
    _dir: tempfile::TempDir,
    /// The nodes (a killed one stays in the list, not running).
    pub nodes: Vec<GarageNode>,
    /// The access key id allowed on [`BUCKET`].
    pub key_id: String,
    /// Its secret.
    pub secret: String,
}

impl Garage {
    /// Starts the cluster, applies the layout, creates [`BUCKET`] and a key; panics (with
    /// the nodes' logs) if any step fails or takes more than its deadline.
    pub(crate) fn start() -> Garage {
        let bin = garage_bin();
        let dir = tempfile::tempdir().expect("tempdir");
        let secret_hex: String = (0..32).map(|_| format!("{:02x}", rand_byte())).collect();
        let mut nodes = Vec::new();
        for i in 0..NODES {
            nodes.push(start_node(&bin, dir.path(), i, &secret_hex));
        }
        let first = nodes[0].config.clone();
        let ids: Vec<String> = nodes
            .iter()
            .map(|n| retry_ok(&bin, &n.config, &["node", "id", "-q"], &nodes))
            .map(|s| s.trim().to_string())
            .collect();
        for id in ids.iter().skip(1) {
            retry_ok(&bin, &first, &["node", "connect", id], &nodes);
        }
        for (i, id) in ids.iter().enumerate() {
            let node = id.split('@').next().unwrap_or(id).to_string();
            let zone = format!("dc{i}");
            retry_ok(
                &bin,
                &first,
                &["layout", "assign", "-z", &zone, "-c", "1G", &node],
                &nodes,
            );
        }
        retry_ok(&bin, &first, &["layout", "apply", "--version", "1"], &nodes);
        retry_ok(&bin, &first, &["bucket", "create", BUCKET], &nodes);
        let key = retry_ok(&bin, &first, &["key", "create", "isnode-test"], &nodes);
        let field = |name: &str| {
            key.lines()
                .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
                .unwrap_or_else(|| panic!("no {name:?} in `garage key create`'s output"))
        };
        let key_id = field("Key ID:");
        let secret = field("Secret key:");
        retry_ok(
            &bin,
            &first,
            &[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                BUCKET,
                "--key",
                "isnode-test",
            ],
            &nodes,
        );
        let g = Garage {
            _dir: dir,
            nodes,
            key_id,
            secret,
        };
        g.wait_s3_ready();
        g
    }

    /// The S3 endpoint of node `i` (`http://127.0.0.1:PORT`).
    pub(crate) fn endpoint(&self, i: usize) -> String {
        format!("http://{}", self.nodes[i].s3)
    }

    /// The environment an S3 client (isnode publish, isnode serve) takes its settings from:
    /// node `i`'s endpoint, the region and the key.
    pub(crate) fn env(&self, i: usize) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint(i)),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
        ]
    }

    /// `isnode publish FILE --origin s3://BUCKET/KEY EXTRA...` through node `i` (panics
    /// unless it succeeds, or if it printed the secret); its output.
    pub(crate) fn publish(&self, node: usize, file: &Path, key: &str, extra: &[&str]) -> String {
        let out = super::command()
            .arg("publish")
            .arg(file)
            .arg("--origin")
            .arg(format!("s3://{BUCKET}/{key}"))
            .args(extra)
            .envs(self.env(node))
            .stdin(Stdio::null())
            .output()
            .expect("running isnode publish");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "isnode publish failed: {text}");
        assert!(
            !text.contains(&self.secret),
            "the secret was printed: {text}"
        );
        text
    }

    /// `kill -9` of node `i`.
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every node's log (for a failure message).
    pub(crate) fn logs(&self) -> String {
        logs(&self.nodes)
    }

    /// Waits (bounded) until node 0's S3 API answers a request for the bucket (the layout
    /// is in force once it does not answer 5xx).
    fn wait_s3_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = super::try_http(
                self.nodes[0].s3,
                None,
                "GET",
                &format!("/{BUCKET}"),
                None,
                &[],
            );
            // Unsigned: 403 once the API serves the bucket.
            if let Ok(r) = r {
                if r.status == 403 || r.status == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "garage's S3 API did not come up within 30 s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn rand_byte() -> u8 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() & 0xff) as u8
}

fn start_node(bin: &Path, root: &Path, i: usize, secret_hex: &str) -> GarageNode {
    let dir = root.join(format!("node{i}"));
    std::fs::create_dir_all(&dir).expect("node dir");
    let rpc = free_port();
    let s3 = free_port();
    let admin = free_port();
    let config = dir.join("garage.toml");
    let text = format!(
        "metadata_dir = \"{meta}\"\n\
         data_dir = \"{data}\"\n\
         db_engine = \"sqlite\"\n\
         replication_factor = 3\n\
         rpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
         rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
         rpc_secret = \"{secret_hex}\"\n\
         \n\
         [s3_api]\n\
         s3_region = \"{REGION}\"\n\
         api_bind_addr = \"127.0.0.1:{s3}\"\n\
         root_domain = \".s3.garage.localhost\"\n\
         \n\
         [admin]\n\
         api_bind_addr = \"127.0.0.1:{admin}\"\n",
        meta = dir.join("meta").display(),
        data = dir.join("data").display(),
    );
    std::fs::write(&config, text).expect("garage config");
    let log = dir.join("garage.log");
    let child = Command::new(bin)
        .arg("-c")
        .arg(&config)
        .arg("server")
        .env("RUST_LOG", "garage=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("garage log"))
        .spawn()
        .expect("spawning garage server");
    GarageNode {
        child: ChildGuard(Some(child)),
        config,
        s3: std::net::SocketAddr::from(([127, 0, 0, 1], s3)),
        log,
    }
}

fn logs(nodes: &[GarageNode]) -> String {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "--- garage node {i} ---\n{}",
                std::fs::read_to_string(&n.log).unwrap_or_default()
            )
        })
        .collect()
}

/// Runs `garage -c CONFIG ARGS` until it succeeds (the nodes take a moment to start and
/// to see each other), for at most 30 s; its stdout.
fn retry_ok(bin: &Path, config: &Path, args: &[&str], nodes: &[GarageNode]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(bin)
            .arg("-c")
            .arg(config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running garage");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "garage {args:?} kept failing for 30 s: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs(nodes)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
