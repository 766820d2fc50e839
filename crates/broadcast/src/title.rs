//! The title to broadcast: its codeword geometry and bitrate, and the conversions between
//! seconds and the plan's unit of time τ (one codeword's airtime at the title's bitrate).

use serde::Serialize;

use crate::{PlanError, Ratio};

/// The title as the wire sees it: `codewords` codewords of `codeword_payload_bytes` source
/// bytes each (k source symbols × symbol length), played at `bitrate_bps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Title {
    /// Number of codewords of the title.
    pub codewords: u64,
    /// Source (media) bytes per codeword: k × symbol length.
    pub codeword_payload_bytes: u64,
    /// Playback rate of the media, bits per second.
    pub bitrate_bps: u64,
}

impl Title {
    /// A title of `codewords` codewords of `codeword_payload_bytes` bytes at `bitrate_bps`.
    pub fn new(
        codewords: u64,
        codeword_payload_bytes: u64,
        bitrate_bps: u64,
    ) -> Result<Title, PlanError> {
        let t = Title {
            codewords,
            codeword_payload_bytes,
            bitrate_bps,
        };
        t.validate()?;
        Ok(t)
    }

    /// A title of `duration_s` seconds at `bitrate_bps`, cut into codewords of
    /// `codeword_payload_bytes` (the last one partly filled, as ingest stores it).
    pub fn from_duration(
        duration_s: f64,
        bitrate_bps: u64,
        codeword_payload_bytes: u64,
    ) -> Result<Title, PlanError> {
        let duration_us = micros("duration", duration_s)?;
        if bitrate_bps == 0 {
            return Err(PlanError::Empty { what: "bitrate" });
        }
        if codeword_payload_bytes == 0 {
            return Err(PlanError::Empty {
                what: "codeword size",
            });
        }
        let bits = u128::from(duration_us) * u128::from(bitrate_bps);
        let per_codeword = u128::from(codeword_payload_bytes) * 8 * 1_000_000;
        let codewords = bits.div_ceil(per_codeword);
        let codewords = u64::try_from(codewords).map_err(|_| PlanError::BadSeconds {
            what: "duration",
            value: duration_s,
        })?;
        Title::new(codewords, codeword_payload_bytes, bitrate_bps)
    }

    fn validate(&self) -> Result<(), PlanError> {
        let zero = |what| Err(PlanError::Empty { what });
        if self.codewords == 0 {
            return zero("codeword count");
        }
        if self.codeword_payload_bytes == 0 {
            return zero("codeword size");
        }
        if self.bitrate_bps == 0 {
            return zero("bitrate");
        }
        Ok(())
    }

    /// τ: one codeword's airtime at the title's bitrate, seconds.
    pub fn codeword_airtime_s(&self) -> f64 {
        self.codeword_payload_bytes as f64 * 8.0 / self.bitrate_bps as f64
    }

    /// Playing time of the whole title (whole codewords), seconds.
    pub fn duration_s(&self) -> f64 {
        self.codewords as f64 * self.codeword_airtime_s()
    }

    /// A plan time (in τ) in seconds.
    pub fn seconds(&self, t: Ratio) -> f64 {
        t.to_f64() * self.codeword_airtime_s()
    }

    /// A time in seconds as an exact plan time (in τ), to the microsecond.
    pub fn from_seconds(&self, what: &'static str, s: f64) -> Result<Ratio, PlanError> {
        if !(s.is_finite() && s >= 0.0) {
            return Err(PlanError::BadSeconds { what, value: s });
        }
        let us = (s * 1e6).round() as i128;
        Ok(Ratio::new(
            us * i128::from(self.bitrate_bps),
            i128::from(self.codeword_payload_bytes) * 8 * 1_000_000,
        ))
    }

    /// Whole codewords whose airtime fits in `s` seconds.
    pub fn codewords_within(&self, what: &'static str, s: f64) -> Result<u64, PlanError> {
        micros(what, s)?;
        let t = self.from_seconds(what, s)?;
        Ok(u64::try_from(t.floor()).unwrap_or(u64::MAX))
    }

    /// A rate in codewords per τ as bits per second.
    pub fn rate_bps(&self, codewords_per_tau: f64) -> f64 {
        codewords_per_tau * self.bitrate_bps as f64
    }

    /// The title's size in source bytes (whole codewords).
    pub fn bytes(&self) -> u64 {
        self.codewords.saturating_mul(self.codeword_payload_bytes)
    }
}

/// `s` seconds as whole microseconds; an error unless positive and finite.
fn micros(what: &'static str, s: f64) -> Result<u64, PlanError> {
    if !(s.is_finite() && s > 0.0 && s < 1e12) {
        return Err(PlanError::BadSeconds { what, value: s });
    }
    Ok((s * 1e6).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_duration_rounds_up_to_whole_codewords() {
        // 180 s at 3.5 Mbit/s in 223 x 1408-byte codewords: 78.75 MB / 313984 B = 250.8.
        let t = Title::from_duration(180.0, 3_500_000, 223 * 1408).unwrap();
        assert_eq!(t.codewords, 251);
        assert!((t.codeword_airtime_s() - 0.717_677).abs() < 1e-5);
        assert_eq!(
            Title::from_duration(0.0, 1, 1),
            Err(PlanError::BadSeconds {
                what: "duration",
                value: 0.0
            })
        );
        assert!(matches!(
            Title::from_duration(1.0, 0, 1),
            Err(PlanError::Empty { .. })
        ));
    }

    #[test]
    fn codewords_within_a_wait() {
        let t = Title::new(10, 1000, 8000).unwrap(); // tau = 1 s
        assert_eq!(t.codewords_within("wait", 5.0).unwrap(), 5);
        assert_eq!(t.codewords_within("wait", 4.999).unwrap(), 4);
        assert!(t.codewords_within("wait", f64::NAN).is_err());
    }
}
