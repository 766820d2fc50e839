//! Drift of a sampled resource over a soak (sans IO): the least-squares slope of the second
//! half of the run, and the growth from the first to the last tenth of that half.
//!
//! The first half is warm-up (the block pool, the page cache, connection pools and thread
//! pools fill up); what must not happen after it is growth that goes on with time, which a
//! leak shows as a slope that does not flatten.

use serde::Serialize;

/// The drift of one series.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Drift {
    /// Least-squares slope over the second half, units per minute.
    pub slope_per_min: f64,
    /// Mean of the first tenth of the second half.
    pub settled: f64,
    /// Mean of the last tenth of the run.
    pub last: f64,
    /// Largest sample of the run.
    pub peak: f64,
}

impl Drift {
    /// `last - settled`: what the second half added.
    pub fn growth(&self) -> f64 {
        self.last - self.settled
    }
}

/// The drift of `samples`, taken every `interval_s` seconds. `None` with fewer than 10
/// samples (too short to have a second half worth a slope).
pub fn drift(samples: &[f64], interval_s: f64) -> Option<Drift> {
    if samples.len() < 10 || interval_s <= 0.0 {
        return None;
    }
    let half = samples.get(samples.len() / 2..)?;
    let tenth = (half.len() / 10).max(1);
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    Some(Drift {
        slope_per_min: slope(half) / interval_s * 60.0,
        settled: mean(half.get(..tenth)?),
        last: mean(half.get(half.len() - tenth..)?),
        peak: samples.iter().copied().fold(f64::MIN, f64::max),
    })
}

/// Least-squares slope of `ys` against their index (units per sample).
fn slope(ys: &[f64]) -> f64 {
    let n = ys.len() as f64;
    if ys.len() < 2 {
        return 0.0;
    }
    let mx = (n - 1.0) / 2.0;
    let my = ys.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        let dx = i as f64 - mx;
        num += dx * (y - my);
        den += dx * dx;
    }
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

/// What a soak may add in its second half before it counts as a leak.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DriftBounds {
    /// Most RSS growth, bytes.
    pub rss_bytes: f64,
    /// Most growth of open descriptors.
    pub fds: f64,
    /// Most growth of threads.
    pub threads: f64,
}

/// The bounds a soak is checked against: RSS may grow by 32 MiB or 10% of its settled value
/// (whichever is larger; allocator fragmentation and cached connections move it), open
/// descriptors by 32 (sessions and connections in flight at the moment of sampling), threads
/// by 8 (blocking pools spawn and retire threads).
pub fn default_bounds(rss_settled_bytes: f64) -> DriftBounds {
    DriftBounds {
        rss_bytes: (32.0 * 1024.0 * 1024.0f64).max(0.1 * rss_settled_bytes),
        fds: 32.0,
        threads: 8.0,
    }
}

/// The bounds exceeded, each said in one line (empty: none).
pub fn exceeded(rss: &Drift, fds: &Drift, threads: &Drift, b: &DriftBounds) -> Vec<String> {
    let mut out = Vec::new();
    if rss.growth() > b.rss_bytes {
        out.push(format!(
            "RSS grew {:.1} MiB in the second half (bound {:.1} MiB)",
            rss.growth() / 1048576.0,
            b.rss_bytes / 1048576.0
        ));
    }
    if fds.growth() > b.fds {
        out.push(format!(
            "open descriptors grew by {:.0} in the second half (bound {:.0})",
            fds.growth(),
            b.fds
        ));
    }
    if threads.growth() > b.threads {
        out.push(format!(
            "threads grew by {:.0} in the second half (bound {:.0})",
            threads.growth(),
            b.threads
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_series_has_no_drift() {
        let xs: Vec<f64> = (0..100)
            .map(|i| if i < 20 { i as f64 } else { 50.0 })
            .collect();
        let d = drift(&xs, 1.0).expect("long enough");
        assert!(
            d.slope_per_min.abs() < 1e-9 && d.growth().abs() < 1e-9,
            "{d:?}"
        );
        assert_eq!(d.peak, 50.0);
    }

    #[test]
    fn a_leak_shows_as_slope_and_growth() {
        let xs: Vec<f64> = (0..120).map(|i| 1000.0 + 2.0 * i as f64).collect();
        let d = drift(&xs, 1.0).expect("long enough");
        assert!((d.slope_per_min - 120.0).abs() < 1e-6, "{d:?}");
        assert!(d.growth() > 90.0);
        let b = DriftBounds {
            rss_bytes: 50.0,
            fds: 1e9,
            threads: 1e9,
        };
        assert_eq!(exceeded(&d, &d, &d, &b).len(), 1);
    }

    #[test]
    fn short_series_have_no_verdict() {
        assert_eq!(drift(&[1.0; 9], 1.0), None);
        assert_eq!(drift(&[1.0; 20], 0.0), None);
    }
}
