//! Unicast repair (hybrid FEC + ARQ, in the style of 3GPP TS 26.346 §9 symbol-based file
//! repair): a codeword the Reed-Solomon code could not decode before the stream moved on
//! is completed with stored packets fetched over HTTP from the same server
//! (`GET /v1/objects/{name}/codewords/{sbn}/packets?esi=...`, docs/protocol.md, "Unicast
//! repair").
//!
//! - [`plan_request`] (pure): which ESIs to ask for: exactly as many as the codeword lacks
//!   (k minus the distinct symbols in), missing source symbols first (they need no decoding),
//!   then missing repair symbols.
//! - [`RepairLoop`] (sans-IO): driven by the receive loop with its clock; holds back the
//!   release of a codeword at risk ([`Receiver::at_risk`]) while its repair is under way, up
//!   to a deadline, and feeds the fetched packets to the receive core.
//! - [`Fetcher`]: the thin shell, a thread that waits the random back-off (uniform in
//!   `[0, --repair-backoff-ms)`, as 26.346's random time period spreads the requests of many
//!   receivers), does the request with `ureq`, and verifies each packet's CRC32C
//!   ([`isnode_wire::parse_data_packet`]) and identifiers before handing it back.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use isnode_wire::parse_data_packet;

use crate::receiver::{AtRisk, Receiver};

/// Longest a codeword is held back for its repair, whatever its playing time.
pub const MAX_REPAIR_WAIT: Duration = Duration::from_secs(5);
/// Shortest hold (the playing time of a codeword at a high bitrate is only milliseconds).
pub const MIN_REPAIR_WAIT: Duration = Duration::from_millis(500);
/// Requests per codeword at most (a second one if packets of the first failed checks).
const MAX_ATTEMPTS: u32 = 2;
/// Timeout of one repair request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The ESIs to request for a codeword at risk: `k - have` of them (0 if it is decodable),
/// the missing source symbols first, then the missing repair symbols, each in ESI order.
pub fn plan_request(risk: &AtRisk) -> Vec<u32> {
    let k = risk.source_symbols as usize;
    let have = risk.present.iter().filter(|p| **p).count();
    let need = k.saturating_sub(have);
    let missing = |range: std::ops::Range<usize>| {
        range.filter(|&e| !risk.present.get(e).copied().unwrap_or(true))
    };
    missing(0..k.min(risk.present.len()))
        .chain(missing(k.min(risk.present.len())..risk.present.len()))
        .take(need)
        .map(|e| e as u32)
        .collect()
}

/// What the repair did during one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairStats {
    /// Codewords the FEC could not decode that the repair completed.
    pub codewords_repaired: u32,
    /// Codewords whose repair failed or came too late (released as lost).
    pub codewords_failed: u32,
    /// Repair requests made.
    pub requests: u64,
    /// Packets fetched and accepted (CRC32C and identifiers checked).
    pub packets_fetched: u64,
    /// Body bytes fetched.
    pub bytes_fetched: u64,
}

/// One request for the fetcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Codeword.
    pub sbn: u32,
    /// ESIs wanted.
    pub esis: Vec<u32>,
}

/// The fetcher's answer to a [`Request`].
#[derive(Debug)]
pub struct Answer {
    /// Codeword.
    pub sbn: u32,
    /// The verified packets (or why there are none).
    pub packets: anyhow::Result<Vec<Vec<u8>>>,
    /// Body bytes received.
    pub bytes: u64,
}

/// Where the repair of the head codeword stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// A request is out; hold until the deadline.
    Waiting {
        sbn: u32,
        deadline: Instant,
        attempt: u32,
    },
    /// Given up for this codeword: let it go as lost.
    GaveUp { sbn: u32 },
}

/// The sans-IO repair decisions of one session (see the module documentation).
#[derive(Debug)]
pub struct RepairLoop {
    /// How long a codeword is held back for its repair.
    wait: Duration,
    hold: Option<Hold>,
    stats: RepairStats,
}

/// What [`RepairLoop::step`] wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Release as usual (nothing at risk, or its repair given up).
    Release,
    /// Hold the release back (a repair is under way).
    Hold,
    /// Send this request, and hold.
    Ask(Request),
}

impl RepairLoop {
    /// Holds a codeword back at most `codeword_time` (its playing time, bounded to
    /// [`MIN_REPAIR_WAIT`]..[`MAX_REPAIR_WAIT`]).
    pub fn new(codeword_time: Duration) -> RepairLoop {
        RepairLoop {
            wait: codeword_time.clamp(MIN_REPAIR_WAIT, MAX_REPAIR_WAIT),
            hold: None,
            stats: RepairStats::default(),
        }
    }

    /// Decides, at `now`, what to do about the receive core's head codeword.
    pub fn step(&mut self, rx: &Receiver, now: Instant) -> Step {
        let Some(risk) = rx.at_risk() else {
            return Step::Release;
        };
        match self.hold {
            Some(Hold::GaveUp { sbn }) if sbn == risk.sbn => return Step::Release,
            Some(Hold::Waiting { sbn, deadline, .. }) if sbn == risk.sbn => {
                if now < deadline {
                    return Step::Hold;
                }
                self.give_up(sbn);
                return Step::Release;
            }
            _ => {}
        }
        self.ask(&risk, now + self.wait, 1)
    }

    fn ask(&mut self, risk: &AtRisk, deadline: Instant, attempt: u32) -> Step {
        let esis = plan_request(risk);
        if esis.is_empty() {
            return Step::Release;
        }
        self.hold = Some(Hold::Waiting {
            sbn: risk.sbn,
            deadline,
            attempt,
        });
        self.stats.requests += 1;
        Step::Ask(Request {
            sbn: risk.sbn,
            esis,
        })
    }

    fn give_up(&mut self, sbn: u32) {
        self.hold = Some(Hold::GaveUp { sbn });
        self.stats.codewords_failed += 1;
    }

    /// Feeds an answer to `rx` (each packet through [`Receiver::push`] at `at`); returns a
    /// second request if the codeword still lacks symbols and an attempt is left.
    pub fn answer(&mut self, rx: &mut Receiver, a: Answer, at: Duration) -> Option<Request> {
        let Some(Hold::Waiting {
            sbn,
            deadline,
            attempt,
        }) = self.hold
        else {
            return None;
        };
        if sbn != a.sbn {
            return None;
        }
        self.stats.bytes_fetched += a.bytes;
        match a.packets {
            Ok(packets) => {
                for p in &packets {
                    rx.push(p, at);
                }
                self.stats.packets_fetched += packets.len() as u64;
            }
            Err(e) => tracing::warn!("repair of codeword {sbn}: {e:#}"),
        }
        match rx.at_risk() {
            Some(risk) if risk.sbn == sbn => {
                if attempt < MAX_ATTEMPTS {
                    if let Step::Ask(r) = self.ask(&risk, deadline, attempt + 1) {
                        return Some(r);
                    }
                }
                self.give_up(sbn);
                None
            }
            _ => {
                self.stats.codewords_repaired += 1;
                self.hold = None;
                None
            }
        }
    }

    /// Forgets the request out and a codeword given up: the stream starts again (a
    /// resumed session, on another server or another copy), so its codewords may be
    /// repaired afresh.
    pub fn restart(&mut self) {
        self.hold = None;
    }

    /// Whether a request is out.
    pub fn waiting(&self) -> bool {
        matches!(self.hold, Some(Hold::Waiting { .. }))
    }

    /// The counters so far.
    pub fn stats(&self) -> RepairStats {
        self.stats
    }
}

/// Percent-encodes an object name for a URL path segment.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// [`fetch`], asked again every [`RETRY_PAUSE`] while the server cannot be reached (a
/// restart's gap), for at most [`MAX_REPAIR_WAIT`]; an answer of the server, even an error
/// status, is final.
fn fetch_riding_through(
    agent: (&ureq::Agent, Option<&str>),
    base: &str,
    object: &str,
    r: &Request,
) -> (anyhow::Result<Vec<Vec<u8>>>, u64) {
    let started = std::time::Instant::now();
    loop {
        let got = fetch(agent, base, object, r);
        let unreachable = got
            .0
            .as_ref()
            .is_err_and(|e| e.downcast_ref::<ureq::Error>().is_some());
        if !unreachable || started.elapsed() + RETRY_PAUSE > MAX_REPAIR_WAIT {
            return got;
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}

/// The pause between two tries of a repair request whose server cannot be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The repair request of `r` on the server at `base`, its answer split and verified.
fn fetch(
    (agent, bearer): (&ureq::Agent, Option<&str>),
    base: &str,
    object: &str,
    r: &Request,
) -> (anyhow::Result<Vec<Vec<u8>>>, u64) {
    let esis: Vec<String> = r.esis.iter().map(u32::to_string).collect();
    let url = format!(
        "{base}/v1/objects/{}/codewords/{}/packets?esi={}",
        path_segment(object),
        r.sbn,
        esis.join(",")
    );
    let mut req = agent.get(&url);
    if let Some(b) = bearer {
        req = req.header("Authorization", b);
    }
    let got = req.call().context("repair request").and_then(|mut resp| {
        let status = resp.status().as_u16();
        // A packet is at most 2 + 28 + 65 535 bytes: bound the body by what was asked.
        let limit = r.esis.len() as u64 * (2 + 65_600);
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .context("reading the repair answer")?;
        if status != 200 {
            bail!(
                "server answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(body)
    });
    match got {
        Ok(body) => {
            let n = body.len() as u64;
            (split_verified(&body, r), n)
        }
        Err(e) => (Err(e), 0),
    }
}

/// Splits a repair answer into its packets and keeps those that pass their CRC32C and are
/// the symbols asked for.
pub fn split_verified(mut body: &[u8], r: &Request) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Some((len, rest)) = body.split_first_chunk::<2>() else {
            bail!("a truncated length prefix");
        };
        let len = usize::from(u16::from_be_bytes(*len));
        let Some(packet) = rest.get(..len) else {
            bail!("a packet of {len} bytes cut short");
        };
        body = &rest[len..];
        match parse_data_packet(packet) {
            Ok(p) if p.id.sbn == r.sbn && r.esis.contains(&u32::from(p.id.esi)) => {
                out.push(packet.to_vec())
            }
            Ok(p) => tracing::warn!("repair answer: unexpected symbol {}/{}", p.id.sbn, p.id.esi),
            Err(e) => tracing::warn!("repair answer: a packet failed its checks: {e}"),
        }
    }
    Ok(out)
}

/// The thread doing the repair requests, one at a time, each after a random back-off.
pub struct Fetcher {
    requests: Option<mpsc::Sender<Request>>,
    answers: mpsc::Receiver<Answer>,
    thread: Option<JoinHandle<()>>,
}

impl Fetcher {
    /// Starts the thread for `object` on the server at `base`; each request waits a random
    /// back-off uniform in `[0, backoff)` first.
    /// HTTPS requests use `tls`; the role `token`, if any, goes as `Authorization: Bearer`.
    pub fn start(
        (base, token): (&str, Option<&str>),
        object: &str,
        backoff: Duration,
        tls: ureq::tls::TlsConfig,
    ) -> Fetcher {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let (req_tx, req_rx) = mpsc::channel::<Request>();
        let (ans_tx, ans_rx) = mpsc::channel::<Answer>();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .tls_config(tls)
            .build()
            .new_agent();
        let (base, object) = (crate::control::base_url(base), object.to_string());
        let thread = std::thread::spawn(move || {
            for r in req_rx {
                let max_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX);
                if max_ms > 0 {
                    std::thread::sleep(Duration::from_millis(rand::random_range(0..max_ms)));
                }
                let (packets, bytes) =
                    fetch_riding_through((&agent, bearer.as_deref()), &base, &object, &r);
                if ans_tx
                    .send(Answer {
                        sbn: r.sbn,
                        packets,
                        bytes,
                    })
                    .is_err()
                {
                    return;
                }
            }
        });
        Fetcher {
            requests: Some(req_tx),
            answers: ans_rx,
            thread: Some(thread),
        }
    }

    /// Queues a request.
    pub fn send(&self, r: Request) {
        if let Some(tx) = &self.requests {
            let _ = tx.send(r);
        }
    }

    /// An answer, if one is in (waits at most `timeout`).
    pub fn recv(&self, timeout: Duration) -> Option<Answer> {
        if timeout.is_zero() {
            self.answers.try_recv().ok()
        } else {
            self.answers.recv_timeout(timeout).ok()
        }
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The playing time of a full codeword of `rx`'s object at `bitrate_bps` (zero if unknown).
pub fn codeword_time(rx: &Receiver, bitrate_bps: u64) -> Duration {
    let bits = f64::from(rx.partition().a_large) * f64::from(rx.params().symbol_len) * 8.0;
    if bitrate_bps == 0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(bits / bitrate_bps as f64).unwrap_or(MAX_REPAIR_WAIT)
}

/// The repair of one session: the decisions ([`RepairLoop`]) and the fetcher thread.
pub struct Repair {
    rl: RepairLoop,
    fetcher: Fetcher,
    /// The object repaired.
    object: String,
    /// Each request's random back-off bound.
    backoff: Duration,
    /// The role token the requests carry, if any.
    token: Option<String>,
    /// The receive loop's time origin (what `Receiver::push` is given is relative to it).
    epoch: Instant,
}

impl Repair {
    /// Repairs `object` from the server at `base`: each request after a random back-off in
    /// `[0, backoff)`, a codeword held back at most its playing time `codeword_time`
    /// (bounded by [`MIN_REPAIR_WAIT`] and [`MAX_REPAIR_WAIT`]). HTTPS requests use `tls`,
    /// and carry the role `token`, if any.
    pub fn start(
        (base, tls, token): (&str, ureq::tls::TlsConfig, Option<&str>),
        object: &str,
        backoff: Duration,
        codeword_time: Duration,
        epoch: Instant,
    ) -> Repair {
        Repair {
            rl: RepairLoop::new(codeword_time),
            fetcher: Fetcher::start((base, token), object, backoff, tls),
            object: object.to_string(),
            backoff,
            token: token.map(str::to_string),
            epoch,
        }
    }

    /// Sends the requests from now on to the server at `base` (a session resumed on
    /// another server), with the role `token` if any (the caller decides whether `base`
    /// may have it); a request still out to the old one is given up by its deadline.
    pub fn retarget(&mut self, base: &str, tls: ureq::tls::TlsConfig, token: Option<&str>) {
        self.token = token.map(str::to_string);
        let new = Fetcher::start(
            (base, self.token.as_deref()),
            &self.object,
            self.backoff,
            tls,
        );
        let old = std::mem::replace(&mut self.fetcher, new);
        // Its thread may be in a request to the lost server: not waited for here.
        std::thread::spawn(move || drop(old));
        self.rl.restart();
    }

    /// The stream is another copy from the release point on (a re-bound receive core):
    /// codewords given up or asked for before are repaired afresh.
    pub fn rebound(&mut self) {
        self.rl.restart();
    }

    fn take_answer(&mut self, rx: &mut Receiver, a: Answer) {
        let at = self.epoch.elapsed();
        if let Some(again) = self.rl.answer(rx, a, at) {
            self.fetcher.send(again);
        }
    }

    /// Whether the release of `rx`'s head codeword must wait now: takes the answers that
    /// are in, and asks for the symbols of a codeword at risk.
    pub fn holds(&mut self, rx: &mut Receiver) -> bool {
        while let Some(a) = self.fetcher.recv(Duration::ZERO) {
            self.take_answer(rx, a);
        }
        match self.rl.step(rx, Instant::now()) {
            Step::Release => false,
            Step::Hold => true,
            Step::Ask(r) => {
                self.fetcher.send(r);
                true
            }
        }
    }

    /// If a request is out, waits at most `timeout` for its answer and takes it; false if
    /// no request is out.
    pub fn wait(&mut self, rx: &mut Receiver, timeout: Duration) -> bool {
        if !self.rl.waiting() {
            return false;
        }
        if let Some(a) = self.fetcher.recv(timeout) {
            self.take_answer(rx, a);
        }
        true
    }

    /// The counters so far.
    pub fn stats(&self) -> RepairStats {
        self.rl.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::{ReceiverConfig, SessionParams};

    fn risk(k: u32, n: u32, present: &[u32]) -> AtRisk {
        AtRisk {
            sbn: 3,
            source_symbols: k,
            present: (0..n).map(|e| present.contains(&e)).collect(),
        }
    }

    #[test]
    fn asks_just_enough_preferring_source_symbols() {
        // k = 10, m = 4; 7 in (5 source, 2 repair): 3 more needed, all source.
        assert_eq!(
            plan_request(&risk(10, 14, &[0, 2, 3, 5, 9, 10, 13])),
            [1, 4, 6]
        );
        // Every source symbol gone and only 1 repair in: the 10 - 1 = 9 first source ones.
        assert_eq!(
            plan_request(&risk(10, 14, &[12])),
            (0..9).collect::<Vec<_>>()
        );
        // Decodable already: nothing.
        assert!(plan_request(&risk(4, 6, &[0, 1, 4, 5])).is_empty());
        // Nothing in at all: k source symbols.
        assert_eq!(plan_request(&risk(4, 6, &[])), [0, 1, 2, 3]);
    }

    /// A receiver of one object of 3 codewords (k = 4, m = 2, E = 16) and its packets.
    fn setup() -> (Receiver, Vec<Vec<Vec<u8>>>) {
        let object: Vec<u8> = (0..3 * 4 * 16).map(|i| (i * 7) as u8).collect();
        let params = SessionParams {
            tsi: 1,
            toi: 2,
            transfer_length: object.len() as u64,
            symbol_len: 16,
            max_source_block_len: 4,
            repair_symbols: 2,
            start_codeword: 0,
        };
        let packets = crate::sender::object_packets(&object, &params).unwrap();
        let rx = Receiver::new(params, ReceiverConfig::default()).unwrap();
        (rx, packets)
    }

    #[test]
    fn holds_a_codeword_at_risk_until_repaired_then_releases_it() {
        let (mut rx, cw) = setup();
        let t0 = Instant::now();
        let mut rl = RepairLoop::new(Duration::from_secs(1));
        // Codeword 0: only 2 of 6 symbols (ESI 1 and 4); codewords 1, 2 complete.
        rx.push(&cw[0][1], Duration::ZERO);
        rx.push(&cw[0][4], Duration::ZERO);
        assert_eq!(rl.step(&rx, t0), Step::Release, "not given up yet");
        for c in &cw[1..] {
            for p in c {
                rx.push(p, Duration::ZERO);
            }
        }
        rx.finish();
        let Step::Ask(req) = rl.step(&rx, t0) else {
            panic!("a codeword at risk is asked for")
        };
        assert_eq!(
            req,
            Request {
                sbn: 0,
                esis: vec![0, 2]
            }
        );
        assert_eq!(rl.step(&rx, t0 + Duration::from_millis(10)), Step::Hold);
        let answer = Answer {
            sbn: 0,
            packets: Ok(req
                .esis
                .iter()
                .map(|&e| cw[0][e as usize].clone())
                .collect()),
            bytes: 100,
        };
        assert!(rl.answer(&mut rx, answer, Duration::ZERO).is_none());
        assert_eq!(rl.step(&rx, t0), Step::Release);
        let mut data = Vec::new();
        while let Some(out) = rx.poll_output() {
            assert!(
                matches!(out, crate::receiver::Output::Data { .. }),
                "{out:?}"
            );
            data.push(out);
        }
        assert_eq!(data.len(), 3);
        let s = rl.stats();
        assert_eq!(
            (s.codewords_repaired, s.codewords_failed, s.requests),
            (1, 0, 1)
        );
        assert_eq!((s.packets_fetched, s.bytes_fetched), (2, 100));
    }

    #[test]
    fn a_late_or_failed_repair_lets_the_codeword_go() {
        let (mut rx, cw) = setup();
        let t0 = Instant::now();
        let mut rl = RepairLoop::new(Duration::ZERO);
        rx.push(&cw[0][5], Duration::ZERO);
        rx.finish();
        assert!(matches!(rl.step(&rx, t0), Step::Ask(_)));
        // A failed answer: one more attempt, then nothing.
        let fail = |sbn| Answer {
            sbn,
            packets: Err(anyhow::anyhow!("refused")),
            bytes: 0,
        };
        assert!(rl.answer(&mut rx, fail(0), Duration::ZERO).is_some());
        assert!(rl.answer(&mut rx, fail(0), Duration::ZERO).is_none());
        assert_eq!(rl.step(&rx, t0), Step::Release);
        assert!(matches!(
            rx.poll_output(),
            Some(crate::receiver::Output::Lost { sbn: 0, .. })
        ));
        // Codeword 1 at risk; past the hold (MIN_REPAIR_WAIT) it goes.
        assert!(matches!(rl.step(&rx, t0), Step::Ask(_)));
        assert_eq!(rl.step(&rx, t0 + MIN_REPAIR_WAIT), Step::Release);
        assert_eq!(rl.stats().codewords_failed, 2);
    }

    #[test]
    fn answers_are_verified() {
        let (_, cw) = setup();
        let r = Request {
            sbn: 0,
            esis: vec![0, 1],
        };
        let mut body = Vec::new();
        for p in [&cw[0][0], &cw[0][1], &cw[1][0]] {
            body.extend_from_slice(&(p.len() as u16).to_be_bytes());
            body.extend_from_slice(p);
        }
        let mut bad = cw[0][1].clone();
        bad[40] ^= 1;
        body.extend_from_slice(&(bad.len() as u16).to_be_bytes());
        body.extend_from_slice(&bad);
        let got = split_verified(&body, &r).unwrap();
        assert_eq!(
            got,
            vec![cw[0][0].clone(), cw[0][1].clone()],
            "another codeword's and a corrupt packet are dropped"
        );
        assert!(split_verified(&body[..body.len() - 1], &r).is_err());
        assert!(split_verified(&[0], &r).is_err());
        assert_eq!(path_segment("a b/ü.ts"), "a%20b%2F%C3%BC.ts");
    }
}
