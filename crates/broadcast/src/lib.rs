//! Periodic broadcasting plans for isnode (sans-IO: pure, deterministic, no I/O, no clock).
//!
//! A popular title is cut into segments on codeword boundaries; each channel (multicast
//! group) repeats a periodic timetable of codewords. [`plan`] builds the timetable of a
//! scheme — staggered, pyramid, skyscraper, fast, pagoda-style, harmonic, cautious
//! harmonic, quasi-harmonic, polyharmonic — for a title and a maximum start-up wait, and
//! reports what it really costs after codeword rounding: server bandwidth, the client's
//! worst wait, peak receive rate, channels at once and buffer.
//!
//! The plan answers the two shells' questions: a sender asks
//! [`Plan::next_transmission`] ("at virtual time t, which codeword does channel c send
//! next"), a receiver asks [`Plan::tune_in`] ("arriving at t, which channels do I listen
//! to, from when to when, and when does playback start"). [`sim::simulate`] proves a plan
//! by running clients on a virtual clock and checking every byte against its deadline.
//!
//! Time is in τ, one codeword's airtime at the title's bitrate, as exact [`Ratio`]s.
//! The model, the closed forms and their sources are in docs/broadcast.md.

mod build;
mod client;
mod error;
mod names;
mod plan;
mod ratio;
mod scheme;
pub mod sim;
mod title;

pub use build::MAX_CHANNELS;
pub use client::{Delivery, Listen, TuneIn};
pub use error::PlanError;
pub use plan::{
    Channel, ClientFigures, Lane, Plan, Playout, Reception, Run, Segment, Transmission,
};
pub use ratio::Ratio;
pub use scheme::{
    harmonic_number, lower_bound_bps, nominal, pagoda_layout, pagoda_segments, pagoda_streams,
    pyramid_nominal, pyramid_wait_s, quasi_harmonic_multiple, skyscraper_channels,
    skyscraper_series, Nominal, Scheme, SchemeParams, DEFAULT_POLYHARMONIC_M,
    DEFAULT_QUASI_HARMONIC_M, DEFAULT_SKYSCRAPER_WIDTH,
};
pub use title::Title;

use sim::Arrivals;

/// What to plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanRequest {
    /// The title.
    pub title: Title,
    /// The longest start-up wait allowed, seconds.
    pub max_wait_s: f64,
    /// The scheme and its parameters.
    pub scheme: Scheme,
    /// The most a client can receive, bits per second of source payload (none: no cap).
    pub client_cap_bps: Option<u64>,
}

/// The arrivals [`plan`] evaluates for its client figures: 32 slot boundaries spread over
/// the longest cycle (each also just after) and 8 random instants.
pub const PLAN_ARRIVALS: Arrivals = Arrivals::Sample {
    boundaries: 32,
    random: 8,
    seed: 1,
};

/// How much of a plan [`plan_with`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figures {
    /// The client figures too, by simulation ([`PLAN_ARRIVALS`]): seconds for a long title.
    Simulated,
    /// The timetable only (a receiver that has the figures from the server): the plan's
    /// `client` figures are zero; `nominal` and the rates are computed.
    TimetableOnly,
}

/// Plans `req`: segments, channels, and the figures after codeword rounding.
pub fn plan(req: &PlanRequest) -> Result<Plan, PlanError> {
    plan_with(req, Figures::Simulated)
}

/// [`plan`], with the client figures simulated or not. The timetable is the same either way
/// (except pyramid under a client cap, which needs the figures to choose its channels).
pub fn plan_with(req: &PlanRequest, figures: Figures) -> Result<Plan, PlanError> {
    let figures = match (req.scheme, req.client_cap_bps) {
        (Scheme::Pyramid, Some(_)) => Figures::Simulated,
        _ => figures,
    };
    req.scheme.check()?;
    let title = Title::new(
        req.title.codewords,
        req.title.codeword_payload_bytes,
        req.title.bitrate_bps,
    )?;
    let slot = title.codewords_within("maximum wait", req.max_wait_s)?;
    if slot == 0 {
        return Err(PlanError::WaitTooShort {
            scheme: req.scheme.to_string(),
            wait_s: req.max_wait_s,
            airtime_s: title.codeword_airtime_s(),
            needed: 1,
            codeword_bytes: title.codeword_payload_bytes,
            bitrate_bps: title.bitrate_bps,
        });
    }
    let mut p = assemble(
        req,
        title,
        build::build(req.scheme, title.codewords, slot)?,
        figures,
    );
    if req.scheme == Scheme::Pyramid {
        p = pyramid_within_cap(req, p)?;
    }
    if figures == Figures::Simulated {
        check_cap(req, &p)?;
    }
    Ok(p)
}

/// A plan of `layout` with its figures.
fn assemble(req: &PlanRequest, title: Title, layout: build::Layout, figures: Figures) -> Plan {
    let channels = build::channels(layout.lanes, &title);
    let server_rate_bps = channels.iter().map(|c| c.rate_bps).sum();
    let mut p = Plan {
        scheme: req.scheme,
        title,
        max_wait_s: req.max_wait_s,
        slot_codewords: layout.slot_codewords,
        segments: layout.segments,
        channels,
        playout: layout.playout,
        reception: layout.reception,
        server_rate_bps,
        client: ClientFigures {
            worst_wait_s: 0.0,
            peak_receive_bps: 0.0,
            max_channels: 0,
            peak_buffer_bytes: 0,
            late_bytes: 0,
            arrivals: 0,
        },
        nominal: nominal(req.scheme, title.duration_s(), req.max_wait_s),
        notes: layout.notes,
    };
    if figures == Figures::TimetableOnly {
        return p;
    }
    let sim = sim::simulate(&p, PLAN_ARRIVALS);
    p.client = ClientFigures {
        worst_wait_s: title.seconds(sim::worst_wait(&p)),
        peak_receive_bps: sim.peak_receive_bps,
        max_channels: sim.max_channels,
        peak_buffer_bytes: sim.peak_buffer_bytes,
        late_bytes: sim.max_late_bytes,
        arrivals: sim.arrivals.len(),
    };
    p
}

/// Pyramid with fewer channels (fewer at once, lower rates) until the client cap is met.
fn pyramid_within_cap(req: &PlanRequest, p: Plan) -> Result<Plan, PlanError> {
    let Some(cap) = req.client_cap_bps else {
        return Ok(p);
    };
    if p.client.peak_receive_bps <= cap as f64 {
        return Ok(p);
    }
    let mut best: Option<Plan> = None;
    for k in 1..=48 {
        let Ok(layout) = build::pyramid(p.title.codewords, p.slot_codewords, Some(k)) else {
            continue;
        };
        let cand = assemble(req, p.title, layout, Figures::Simulated);
        let fits = cand.client.peak_receive_bps <= cap as f64;
        if fits
            && best
                .as_ref()
                .is_none_or(|b| cand.server_rate_bps < b.server_rate_bps)
        {
            best = Some(cand);
        }
    }
    Ok(best.unwrap_or(p))
}

fn check_cap(req: &PlanRequest, p: &Plan) -> Result<(), PlanError> {
    match req.client_cap_bps {
        Some(cap) if p.client.peak_receive_bps > cap as f64 + 1e-6 => {
            Err(PlanError::ClientBandwidth {
                scheme: req.scheme.name(),
                needed_bps: p.client.peak_receive_bps,
                cap_bps: cap,
            })
        }
        _ => Ok(()),
    }
}
