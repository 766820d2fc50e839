//! `isnode relay`: a lossy UDP relay for tests between processes (this kernel has no netem).
//!
//! Every datagram received on `--listen` is impaired ([`crate::impair`]: Gilbert-Elliott loss,
//! byte corruption, seeded) and the survivors are forwarded, unchanged otherwise, to `--to`.
//! The listening socket takes coalesced datagrams (`UDP_GRO`) where the kernel offers it; they are
//! split, so every packet is impaired and forwarded as its own datagram, as without it.
//! It is one-way: nothing goes back from `--to`. With the server, the client asks for a session
//! to the relay's port (`isnode play --session-port LISTEN_PORT --port TO_PORT`): the server
//! sends to the HTTP peer's IP at the relay's port, and the relay forwards to the client.
//! The client takes datagrams only from the server's IP address by default: the relay sends
//! from its own host's address, which is the server's when both run on one host; for a relay
//! elsewhere, give the client `--accept-from RELAY_IP`.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

pub use crate::impair::LossStep;
use crate::impair::{ImpairConfig, ScheduledImpairer, Verdict};
use crate::net::{enable_gro, grow_recv_buffer, set_poll_timeout, Batch};

/// What `isnode relay` does (its flags are the CLI's `RelayFlags`).
#[derive(Debug, Clone)]
pub struct RelayArgs {
    /// Address to receive on (port 0: an ephemeral port, logged at start).
    pub listen: SocketAddr,
    /// Address to forward to.
    pub to: SocketAddr,
    /// Injected loss and corruption.
    pub impair: ImpairConfig,
    /// Stop after this many seconds.
    pub max_seconds: f64,
    /// Stop after this many seconds without a datagram, once one has arrived.
    pub idle_exit_s: Option<f64>,
    /// Loss steps (`--loss-step SECONDS:LOSS`): from this many seconds after the first
    /// datagram on, the loss rate is this (the burst length, corruption and seed stay
    /// those of `impair`; each step draws from its own seed, `seed + step number`).
    pub loss_steps: Vec<LossStep>,
}

impl RelayArgs {
    /// Arguments with every option at its default.
    pub fn new(listen: SocketAddr, to: SocketAddr) -> RelayArgs {
        RelayArgs {
            listen,
            to,
            impair: ImpairConfig {
                seed: 1,
                ..ImpairConfig::default()
            },
            max_seconds: 3600.0,
            idle_exit_s: None,
            loss_steps: Vec::new(),
        }
    }
}

/// Counters of a relay run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RelayStats {
    /// Packets received (a datagram coalesced by `UDP_GRO` counts each of its packets).
    pub packets_in: u64,
    /// Datagrams forwarded (including corrupted ones).
    pub packets_forwarded: u64,
    /// Datagrams dropped by the injected loss.
    pub packets_dropped: u64,
    /// Datagrams forwarded with a flipped byte.
    pub packets_corrupted: u64,
    /// Datagrams received truncated (larger than 64 KiB), dropped.
    pub packets_truncated: u64,
    /// Sends that failed (e.g. nobody listening at `--to`).
    pub send_errors: u64,
    /// Bytes forwarded.
    pub bytes_forwarded: u64,
    /// Run time in seconds.
    pub duration_s: f64,
}

/// A bound relay, ready to [`run`](Relay::run).
#[derive(Debug)]
pub struct Relay {
    socket: UdpSocket,
    out: UdpSocket,
    args: RelayArgs,
    /// `--loss`, changed by the `--loss-step`s from the first datagram on.
    impairer: ScheduledImpairer,
}

impl Relay {
    /// Checks the arguments and binds `--listen`.
    pub fn bind(args: &RelayArgs) -> anyhow::Result<Relay> {
        let impairer = ScheduledImpairer::new(&args.impair, &args.loss_steps)?;
        let socket =
            UdpSocket::bind(args.listen).with_context(|| format!("binding UDP {}", args.listen))?;
        let any: SocketAddr = if args.to.is_ipv4() {
            "0.0.0.0:0".parse()?
        } else {
            "[::]:0".parse()?
        };
        let out = UdpSocket::bind(any).context("binding the forwarding socket")?;
        Ok(Relay {
            socket,
            out,
            args: args.clone(),
            impairer,
        })
    }

    /// The address the relay receives on.
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.socket.local_addr()?)
    }

    /// Relays until `stop` is set, `--max-seconds` elapse, or the relay was idle for
    /// `--idle-exit-s` after its first datagram. Checks `stop` at least every 50 ms.
    pub fn run(mut self, stop: &AtomicBool) -> anyhow::Result<RelayStats> {
        let max = Duration::try_from_secs_f64(self.args.max_seconds)
            .context("--max-seconds must be >= 0")?;
        let idle_exit = self
            .args
            .idle_exit_s
            .map(Duration::try_from_secs_f64)
            .transpose()
            .context("--idle-exit-s must be >= 0")?;
        grow_recv_buffer(&self.socket, 8 << 20);
        set_poll_timeout(&self.socket, Duration::from_millis(50))?;
        tracing::info!("relay {} -> {}", self.socket.local_addr()?, self.args.to);
        // Coalesced datagrams are split: each packet is forwarded as its own datagram.
        let mut batch = Batch::new(32, 65536, enable_gro(&self.socket));
        let mut stats = RelayStats::default();
        let start = Instant::now();
        let mut last: Option<Instant> = None;
        let mut first: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) && start.elapsed() < max {
            if let (Some(idle), Some(last)) = (idle_exit, last) {
                if last.elapsed() >= idle {
                    break;
                }
            }
            let n = batch.recv(&self.socket).context("receiving")?;
            if n > 0 {
                last = Some(Instant::now());
                let first = *first.get_or_insert(Instant::now());
                self.impairer.advance(first.elapsed());
            }
            for i in 0..n {
                stats.packets_in += 1;
                let (packet, truncated) = batch.packet_mut(i);
                if truncated {
                    stats.packets_truncated += 1;
                    continue;
                }
                match self.impairer.apply(packet) {
                    Verdict::Drop => {
                        stats.packets_dropped += 1;
                        continue;
                    }
                    Verdict::Corrupted => stats.packets_corrupted += 1,
                    Verdict::Pass => {}
                }
                match self.out.send_to(packet, self.args.to) {
                    Ok(_) => {
                        stats.packets_forwarded += 1;
                        stats.bytes_forwarded += packet.len() as u64;
                    }
                    Err(_) => stats.send_errors += 1,
                }
            }
        }
        stats.duration_s = start.elapsed().as_secs_f64();
        Ok(stats)
    }
}

/// Binds and runs a relay (see [`Relay`]).
pub fn relay(args: &RelayArgs, stop: &AtomicBool) -> anyhow::Result<RelayStats> {
    Relay::bind(args)?.run(stop)
}

impl RelayStats {
    /// A one-line human summary.
    pub fn summary(&self) -> String {
        format!(
            "relay: {} in, {} forwarded ({} corrupted), {} dropped, {} truncated, {} send errors, {} bytes in {:.1} s",
            self.packets_in,
            self.packets_forwarded,
            self.packets_corrupted,
            self.packets_dropped,
            self.packets_truncated,
            self.send_errors,
            self.bytes_forwarded,
            self.duration_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step at 0 s applies from the first datagram on.
    #[test]
    fn a_step_changes_the_loss_from_its_time_on() {
        let mut args = RelayArgs::new(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
        );
        args.loss_steps = vec![LossStep {
            after_s: 0.0,
            loss: 1.0,
        }];
        args.max_seconds = 30.0;
        args.idle_exit_s = Some(0.5);
        let relay = Relay::bind(&args).unwrap();
        let to = relay.local_addr().unwrap();
        let h = std::thread::spawn(move || relay.run(&AtomicBool::new(false)));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..50 {
            tx.send_to(b"x", to).unwrap();
        }
        // The relay exits 0.5 s after the last datagram (or at 30 s).
        let stats = h.join().unwrap().unwrap();
        assert_eq!(stats.packets_in, 50, "{stats:?}");
        assert_eq!(
            stats.packets_dropped, 50,
            "loss 1 from the first datagram on"
        );
    }
}
