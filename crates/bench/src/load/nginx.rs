//! nginx under load: Debian's `nginx` started by the benchmark with a configuration made for
//! video on demand (sendfile, `tcp_nopush`; `aio threads` and `directio` as variants; `tls`:
//! HTTPS with the run's certificate), serving the titles' files over HTTP (on the servers'
//! address of the run's [`Net`]) from a scratch directory its unprivileged workers can read.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::net::Net;
use super::title::Title;
use super::tls::{TlsPair, Wire};
use crate::harness::process::children_of;
use crate::harness::server::ServerChild;

/// Worker processes (the machine's cores).
const WORKERS: usize = 2;

/// How nginx reads the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NginxVariant {
    /// `sendfile` from the page cache, in the worker (the classic configuration; the
    /// cheapest when the titles are in the page cache).
    Sendfile,
    /// `sendfile` handed to `aio threads` (a worker never blocks on a disk read; each call
    /// costs a hand-over to the thread pool and back).
    Aio,
    /// `directio` for files of 4 MB and more (aio threads read them, bypassing the page cache).
    Directio,
    /// `sendfile` as deployed, over HTTPS (`listen ... ssl`) with the run's certificate and
    /// key: without kTLS, OpenSSL encrypts in user space (`SSL_write` from a read of the
    /// file instead of `sendfile`).
    Tls,
}

impl NginxVariant {
    /// The server's name in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            NginxVariant::Sendfile => "nginx",
            NginxVariant::Aio => "nginx-aio",
            NginxVariant::Directio => "nginx-directio",
            NginxVariant::Tls => "nginx-tls",
        }
    }
}

/// A running nginx.
pub(crate) struct NginxServer {
    /// The master process.
    pub(crate) child: ServerChild,
    /// Its address.
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
    /// The readers' TLS configuration when it speaks HTTPS.
    tls: Option<Arc<rustls::ClientConfig>>,
}

fn nginx_binary() -> anyhow::Result<PathBuf> {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return Ok(p.into());
        }
    }
    bail!("nginx is not installed; install it with `apt-get install -y nginx` (Debian's package)")
}

/// Writes the titles' files under `dir/www`, readable by anyone.
pub(crate) fn write_titles(dir: &Path, titles: &[Title]) -> anyhow::Result<()> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    for d in [dir, www.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
    }
    for t in titles {
        let p = www.join(&t.name);
        std::fs::write(&p, t.bytes.as_slice())
            .with_context(|| format!("writing {}", p.display()))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// The configuration for a server on `host:port` rooted at `dir/www` (HTTPS with `tls`'s
/// certificate and key for [`NginxVariant::Tls`]).
fn config(
    dir: &Path,
    (host, port): (&str, u16),
    variant: NginxVariant,
    tls: Option<&TlsPair>,
) -> anyhow::Result<String> {
    let d = dir.display();
    let user = if nix_is_root() { "user www-data;" } else { "" };
    let reads = match variant {
        NginxVariant::Sendfile | NginxVariant::Tls => "",
        NginxVariant::Aio => "aio threads;",
        NginxVariant::Directio => "aio threads; directio 4m; directio_alignment 4k;",
    };
    let (ssl, certs) = match (variant, tls) {
        (NginxVariant::Tls, Some(t)) => (
            " ssl",
            format!(
                "ssl_certificate {}; ssl_certificate_key {};",
                t.cert.display(),
                t.key.display()
            ),
        ),
        (NginxVariant::Tls, None) => bail!("nginx over TLS needs the run's certificate"),
        _ => ("", String::new()),
    };
    let listen = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(_)) => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    Ok(format!(
        "daemon off; master_process on; worker_processes {WORKERS}; {user}
pid {d}/nginx.pid; error_log {d}/error.log warn; worker_rlimit_nofile 65536;
events {{ worker_connections 16384; }}
http {{
  access_log off; sendfile on; tcp_nopush on; {reads}
  types {{ video/mp2t ts; }} default_type application/octet-stream;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi; uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  server {{ listen {listen}{ssl}; {certs} root {d}/www; }}
}}
"
    ))
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::geteuid() };
    uid == 0
}

impl NginxServer {
    /// Starts nginx on the titles written under `dir` by [`write_titles`] (inside `group`
    /// when there is one: its workers, forked by the master, are in it too; `tls`: the
    /// run's certificate, which [`NginxVariant::Tls`] serves).
    pub(crate) fn start(
        dir: &Path,
        variant: NginxVariant,
        net: &Net,
        group: Option<&crate::cgroup::Cgroup>,
        tls: Option<&TlsPair>,
    ) -> anyhow::Result<NginxServer> {
        let exe = nginx_binary()?;
        let host = net.server_host().to_string();
        let port = TcpListener::bind((host.as_str(), 0))?.local_addr()?.port();
        std::fs::create_dir_all(dir.join("tmp"))?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, (&host, port), variant, tls)?)?;
        let mut command = match group {
            Some(g) => g.command(&exe),
            None => Command::new(&exe),
        };
        let child = command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let server = NginxServer {
            child: ServerChild(child),
            host,
            port,
            tls: match variant {
                NginxVariant::Tls => tls.map(|t| t.client.clone()),
                _ => None,
            },
        };
        server.wait_ready(dir)?;
        Ok(server)
    }

    fn wait_ready(&self, dir: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = TcpStream::connect((self.host.as_str(), self.port)).is_ok();
            if up && children_of(self.child.0.id()).len() >= WORKERS {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                bail!(
                    "nginx did not come up on port {} within 10 s: {log}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The master and its workers.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let master = self.child.0.id();
        let mut p = vec![master];
        p.extend(children_of(master));
        p
    }

    /// Connects (over TLS when it speaks HTTPS) and asks for `name`; the stream is
    /// non-blocking.
    pub(crate) fn get(&self, name: &str) -> anyhow::Result<Wire> {
        let ip: std::net::IpAddr = self
            .host
            .parse()
            .with_context(|| format!("nginx's address {:?}", self.host))?;
        let request =
            format!("GET /{name} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        Wire::connect(
            SocketAddr::new(ip, self.port),
            &self.host,
            self.tls.as_ref(),
            request.as_bytes(),
        )
        .context("connecting to nginx")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_variant_listens_with_ssl_and_the_runs_certificate() {
        let dir = Path::new("/srv/run");
        let plain = config(dir, ("127.0.0.1", 8080), NginxVariant::Sendfile, None).unwrap();
        assert!(plain.contains("listen 127.0.0.1:8080; "), "{plain}");
        assert!(!plain.contains("ssl"), "{plain}");
        assert!(config(dir, ("127.0.0.1", 8080), NginxVariant::Tls, None).is_err());
        let pair = TlsPair {
            cert: "/srv/run/tls/cert.pem".into(),
            key: "/srv/run/tls/key.pem".into(),
            client: Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            ),
        };
        let tls = config(dir, ("10.0.0.1", 443), NginxVariant::Tls, Some(&pair)).unwrap();
        assert!(tls.contains("listen 10.0.0.1:443 ssl;"), "{tls}");
        assert!(
            tls.contains("ssl_certificate /srv/run/tls/cert.pem;"),
            "{tls}"
        );
        assert!(
            tls.contains("ssl_certificate_key /srv/run/tls/key.pem;"),
            "{tls}"
        );
        assert!(tls.contains("sendfile on;"), "{tls}");
        let v6 = config(dir, ("::1", 8080), NginxVariant::Sendfile, None).unwrap();
        assert!(v6.contains("listen [::1]:8080;"), "{v6}");
    }
}
