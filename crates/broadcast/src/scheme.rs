//! The schemes, their parameters, and their published closed forms (nominal figures:
//! continuous time, no codeword rounding). Sources are in docs/broadcast.md.

use std::fmt;

use serde::Serialize;

use crate::error::PlanError;

/// Default width cap W of skyscraper broadcasting.
pub const DEFAULT_SKYSCRAPER_WIDTH: u64 = 52;
/// Default parameter m of quasi-harmonic broadcasting.
pub const DEFAULT_QUASI_HARMONIC_M: u32 = 4;
/// Default parameter m of polyharmonic broadcasting.
pub const DEFAULT_POLYHARMONIC_M: u32 = 4;

/// A periodic broadcasting scheme and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "scheme", rename_all = "kebab-case")]
pub enum Scheme {
    /// The whole title on ⌈D/w⌉ channels started w apart (near video-on-demand).
    Staggered,
    /// Viswanathan & Imielinski: geometric segments, one channel each, rate α·b.
    Pyramid,
    /// Hua & Sheu: segments 1,2,2,5,5,12,12,25,25,52,52,… capped at `width`, rate b each.
    Skyscraper {
        /// The width cap W (largest segment, in first-segment units).
        width: u64,
    },
    /// Juhn & Tseng fast broadcasting: channel i carries 2^i equal segments at rate b.
    Fast,
    /// Pagoda-style mapping (Pâris, Carter, Long): equal segments on rate-b channels,
    /// segment j at least once every j slots.
    Pagoda,
    /// Juhn & Tseng harmonic broadcasting as first published: segment i at b/i (can be late).
    Harmonic,
    /// Pâris, Carter, Long cautious harmonic: S1 at b, S2/S3 alternating at b, S_i at b/(i−1).
    CautiousHarmonic,
    /// Pâris, Carter, Long quasi-harmonic: segment i in i·m−1 fragments at m·b/(i·m−1).
    QuasiHarmonic {
        /// Sub-slots per slot.
        m: u32,
    },
    /// Pâris, Carter, Long polyharmonic: wait m slots, segment i at b/(m+i−1).
    Polyharmonic {
        /// Slots waited.
        m: u32,
    },
}

/// Scheme parameters that are not part of the scheme's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemeParams {
    /// Skyscraper's width cap W.
    pub skyscraper_width: u64,
    /// Quasi-harmonic's m.
    pub quasi_harmonic_m: u32,
    /// Polyharmonic's m.
    pub polyharmonic_m: u32,
}

impl SchemeParams {
    /// The parameters a broadcast request or description names (`width` for skyscraper,
    /// `m` for quasi-harmonic and polyharmonic), the defaults for the rest.
    pub fn from_options(width: Option<u64>, m: Option<u32>) -> SchemeParams {
        let d = SchemeParams::default();
        SchemeParams {
            skyscraper_width: width.unwrap_or(d.skyscraper_width),
            quasi_harmonic_m: m.unwrap_or(d.quasi_harmonic_m),
            polyharmonic_m: m.unwrap_or(d.polyharmonic_m),
        }
    }
}

impl Default for SchemeParams {
    fn default() -> SchemeParams {
        SchemeParams {
            skyscraper_width: DEFAULT_SKYSCRAPER_WIDTH,
            quasi_harmonic_m: DEFAULT_QUASI_HARMONIC_M,
            polyharmonic_m: DEFAULT_POLYHARMONIC_M,
        }
    }
}

impl Scheme {
    /// The schemes' names, as `parse` takes them.
    pub const NAMES: [&'static str; 9] = crate::names::SCHEME_NAMES;

    /// Every scheme with `params`, in table order.
    pub fn all(params: SchemeParams) -> Vec<Scheme> {
        Scheme::NAMES
            .iter()
            .filter_map(|n| Scheme::parse(n, params).ok())
            .collect()
    }

    /// The scheme called `name` (see [`Scheme::NAMES`]) with `params`.
    pub fn parse(name: &str, params: SchemeParams) -> Result<Scheme, PlanError> {
        let s = match name {
            "staggered" => Scheme::Staggered,
            "pyramid" => Scheme::Pyramid,
            "skyscraper" => Scheme::Skyscraper {
                width: params.skyscraper_width,
            },
            "fast" => Scheme::Fast,
            "pagoda" => Scheme::Pagoda,
            "harmonic" => Scheme::Harmonic,
            "cautious-harmonic" => Scheme::CautiousHarmonic,
            "quasi-harmonic" => Scheme::QuasiHarmonic {
                m: params.quasi_harmonic_m,
            },
            "polyharmonic" => Scheme::Polyharmonic {
                m: params.polyharmonic_m,
            },
            other => return Err(PlanError::UnknownScheme(other.to_string())),
        };
        s.check()?;
        Ok(s)
    }

    /// The scheme's name.
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Staggered => "staggered",
            Scheme::Pyramid => "pyramid",
            Scheme::Skyscraper { .. } => "skyscraper",
            Scheme::Fast => "fast",
            Scheme::Pagoda => "pagoda",
            Scheme::Harmonic => "harmonic",
            Scheme::CautiousHarmonic => "cautious-harmonic",
            Scheme::QuasiHarmonic { .. } => "quasi-harmonic",
            Scheme::Polyharmonic { .. } => "polyharmonic",
        }
    }

    /// Checks the parameters' ranges.
    pub fn check(&self) -> Result<(), PlanError> {
        let bad = |name, value: u64, range| PlanError::Parameter {
            scheme: self.name(),
            name,
            value,
            range,
        };
        match *self {
            Scheme::Skyscraper { width } if width == 0 => Err(bad("W", width, "W >= 1")),
            Scheme::QuasiHarmonic { m } if !(1..=64).contains(&m) => {
                Err(bad("m", u64::from(m), "1 <= m <= 64"))
            }
            Scheme::Polyharmonic { m } if !(1..=1024).contains(&m) => {
                Err(bad("m", u64::from(m), "1 <= m <= 1024"))
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Skyscraper { width } => write!(f, "skyscraper(W={width})"),
            Scheme::QuasiHarmonic { m } => write!(f, "quasi-harmonic(m={m})"),
            Scheme::Polyharmonic { m } => write!(f, "polyharmonic(m={m})"),
            s => f.write_str(s.name()),
        }
    }
}

/// The n-th harmonic number H(n) = 1 + 1/2 + … + 1/n (H(0) = 0).
pub fn harmonic_number(n: u64) -> f64 {
    (1..=n).map(|i| 1.0 / i as f64).sum()
}

/// The skyscraper series 1,2,2,5,5,12,12,25,25,52,52,105,… (i from 1), uncapped.
pub fn skyscraper_series(i: u64) -> u64 {
    let mut f = 1u64;
    for n in 2..=i {
        f = match n % 4 {
            _ if n <= 3 => 2,
            0 => 2 * f + 1,
            2 => 2 * f + 2,
            _ => f,
        }
        .min(u64::MAX / 4);
    }
    f
}

/// Lower bound on the server bandwidth of any scheme serving a title of `duration_s` at
/// `bitrate_bps` with a maximum wait of `wait_s`: b·ln(1 + D/w).
pub fn lower_bound_bps(duration_s: f64, bitrate_bps: f64, wait_s: f64) -> f64 {
    bitrate_bps * (1.0 + duration_s / wait_s).ln()
}

/// A closed form's nominal figures: server bandwidth in multiples of b, and the wait.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Nominal {
    /// Server bandwidth in multiples of the title's bitrate.
    pub server_multiple: f64,
    /// Maximum wait, seconds.
    pub wait_s: f64,
    /// Channels (segments for the harmonic family).
    pub channels: u64,
}

/// The published closed form of `scheme` for a title of `duration_s` and a maximum wait of
/// `wait_s` (continuous time; pyramid at α = e with the fewest channels that meet the wait).
pub fn nominal(scheme: Scheme, duration_s: f64, wait_s: f64) -> Nominal {
    let ratio = duration_s / wait_s;
    let n = ratio.ceil().max(1.0);
    let nu = n as u64;
    let nom = |server_multiple, wait_s, channels| Nominal {
        server_multiple,
        wait_s,
        channels,
    };
    match scheme {
        Scheme::Staggered => nom(n, duration_s / n, nu),
        Scheme::Pyramid => pyramid_nominal(duration_s, wait_s, std::f64::consts::E),
        Scheme::Skyscraper { width } => {
            let (k, units) = skyscraper_channels(ratio, width);
            nom(k as f64, duration_s / units as f64, k)
        }
        Scheme::Fast => {
            let k = (n + 1.0).log2().ceil().max(1.0);
            nom(k, duration_s / (2f64.powf(k) - 1.0), k as u64)
        }
        Scheme::Pagoda => {
            let k = pagoda_streams(nu);
            nom(k as f64, duration_s / n, k)
        }
        Scheme::Harmonic => nom(harmonic_number(nu), duration_s / n, nu),
        Scheme::CautiousHarmonic => nom(
            harmonic_number(nu - 1) + 0.5,
            duration_s / n,
            nu.saturating_sub(1).max(1),
        ),
        Scheme::QuasiHarmonic { m } => nom(quasi_harmonic_multiple(nu, m), duration_s / n, nu),
        Scheme::Polyharmonic { m } => {
            let segs = (f64::from(m) * ratio).ceil().max(1.0) as u64;
            let b = harmonic_number(u64::from(m) + segs - 1) - harmonic_number(u64::from(m) - 1);
            nom(b, f64::from(m) * duration_s / segs as f64, segs)
        }
    }
}

/// Quasi-harmonic's bandwidth in multiples of b: 1 + Σ_{i=2..n} m/(i·m − 1).
pub fn quasi_harmonic_multiple(n: u64, m: u32) -> f64 {
    let m = f64::from(m);
    1.0 + (2..=n).map(|i| m / (i as f64 * m - 1.0)).sum::<f64>()
}

/// Pyramid's closed form at ratio `alpha`: the fewest channels K with
/// D(α−1)/(α(α^K−1)) ≤ w; bandwidth K·α·b.
pub fn pyramid_nominal(duration_s: f64, wait_s: f64, alpha: f64) -> Nominal {
    let mut k = 1u64;
    loop {
        let wait = pyramid_wait_s(duration_s, alpha, k);
        if wait <= wait_s || k >= 64 {
            return Nominal {
                server_multiple: k as f64 * alpha,
                wait_s: wait,
                channels: k,
            };
        }
        k += 1;
    }
}

/// Pyramid's wait: the first segment's airtime on a channel of rate α·b.
pub fn pyramid_wait_s(duration_s: f64, alpha: f64, channels: u64) -> f64 {
    duration_s * (alpha - 1.0) / (alpha * (alpha.powf(channels as f64) - 1.0))
}

/// Skyscraper channels K for a title of `units` first-segment units with cap W, and the
/// units Σ min(f(i), W) they carry.
pub fn skyscraper_channels(units: f64, width: u64) -> (u64, u64) {
    let mut sum = 0u64;
    let mut k = 0u64;
    while (sum as f64) < units && k < 1_000_000 {
        k += 1;
        sum += skyscraper_series(k).min(width);
    }
    (k.max(1), sum.max(1))
}

/// Segments that `streams` rate-b streams carry in the pagoda-style mapping (see
/// [`pagoda_layout`]).
pub fn pagoda_segments(streams: u64) -> u64 {
    let mut next = 1u64;
    for _ in 0..streams {
        let (_, carried) = pagoda_stream(next, u64::MAX);
        next += carried;
    }
    next - 1
}

/// Streams the pagoda-style mapping needs for `segments` segments.
pub fn pagoda_streams(segments: u64) -> u64 {
    pagoda_layout(segments).len() as u64
}

/// One stream of the pagoda-style mapping whose first segment is `z` (1-based): the number
/// q of interleaved sub-channels, and the segments it carries (at most `limit`).
/// Sub-channel r takes every q-th slot and cycles c_r = ⌊y_r/q⌋ segments starting at y_r,
/// so segment j ≥ y_r recurs every q·c_r ≤ j slots.
pub(crate) fn pagoda_stream(z: u64, limit: u64) -> (u64, u64) {
    let mut best = (1u64, 0u64);
    for q in 1..=z.min(4096) {
        let mut y = z;
        for _ in 0..q {
            y = y.saturating_add(y / q);
        }
        let carried = (y - z).min(limit);
        if carried > best.1 {
            best = (q, carried);
        }
    }
    best
}

/// The pagoda-style mapping of `segments` segments: per stream, (first segment, q, carried).
pub fn pagoda_layout(segments: u64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut next = 1u64;
    while next <= segments {
        let (q, carried) = pagoda_stream(next, segments - next + 1);
        out.push((next, q, carried));
        next += carried;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Scheme::all(SchemeParams::default()) {
            assert_eq!(Scheme::parse(s.name(), SchemeParams::default()), Ok(s));
        }
        assert_eq!(Scheme::all(SchemeParams::default()).len(), 9);
        assert!(matches!(
            Scheme::parse("ladder", SchemeParams::default()),
            Err(PlanError::UnknownScheme(_))
        ));
        let p = SchemeParams {
            polyharmonic_m: 0,
            ..SchemeParams::default()
        };
        assert!(matches!(
            Scheme::parse("polyharmonic", p),
            Err(PlanError::Parameter { name: "m", .. })
        ));
    }

    #[test]
    fn skyscraper_series_matches_hua_sheu() {
        let s: Vec<u64> = (1..=13).map(skyscraper_series).collect();
        assert_eq!(s, [1, 2, 2, 5, 5, 12, 12, 25, 25, 52, 52, 105, 105]);
    }

    #[test]
    fn seed_cautious_harmonic_figure() {
        // Seed 000 §3.4: 3-minute clip, 3.5 Mbit/s, 5 s wait: 16.26 Mbit/s.
        let n = nominal(Scheme::CautiousHarmonic, 180.0, 5.0);
        assert!((n.server_multiple * 3.5 - 16.26).abs() < 0.005, "{n:?}");
    }

    #[test]
    fn pagoda_style_counts() {
        let counts: Vec<u64> = (1..=4).map(pagoda_segments).collect();
        assert_eq!(counts, [1, 3, 8, 20]);
        // Better than fast broadcasting's 2^k - 1 from three streams on.
        assert!(pagoda_segments(5) > 31);
    }

    #[test]
    fn lower_bound_is_below_every_closed_form() {
        for s in Scheme::all(SchemeParams::default()) {
            let n = nominal(s, 7200.0, 5.0);
            assert!(
                n.server_multiple >= (1.0 + 7200.0 / n.wait_s).ln() - 1e-9,
                "{s}"
            );
        }
    }
}
