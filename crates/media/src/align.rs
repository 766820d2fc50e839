//! Whether several renditions of one title can be switched between at segment boundaries:
//! their key frames (random-access points) fall at the same times and they last as long.
//!
//! **Tolerance.** Two boundaries are the same when they differ by less than half a frame of
//! the fastest rendition ([`Tolerance::for_frame_rate`]): two encodes of the same frames
//! put a key frame on the same source frame, whose time differs between containers and
//! muxers only by rounding (90 kHz PTS, `mdhd` timescales, a first fragment ffmpeg stretches
//! by a fraction of a frame), always well under half a frame; a key frame on the
//! neighbouring frame is a whole frame away and is refused. Durations (from the probe: PCR
//! span, `mvhd`) are allowed [`Tolerance::duration_s`], by default one frame plus 100 ms:
//! the audio of two encodes may end a packet apart, and the TS probe measures between PCRs.

/// How close boundaries and durations must be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Largest difference between two renditions' key-frame times, seconds.
    pub boundary_s: f64,
    /// Largest difference between two renditions' durations, seconds.
    pub duration_s: f64,
}

impl Tolerance {
    /// Half a frame for boundaries, one frame + 100 ms for durations, at `fps` frames per
    /// second (25 frame/s when `fps` is not a positive finite number).
    pub fn for_frame_rate(fps: f64) -> Tolerance {
        let fps = if fps.is_finite() && fps > 0.0 {
            fps
        } else {
            25.0
        };
        Tolerance {
            boundary_s: 0.5 / fps,
            duration_s: 1.0 / fps + 0.1,
        }
    }
}

/// One rendition as the check sees it.
#[derive(Clone, Copy, Debug)]
pub struct RenditionTiming<'a> {
    /// Its key-frame times, seconds, increasing (e.g. the `time_s` of its index points).
    pub key_times_s: &'a [f64],
    /// Its duration, seconds.
    pub duration_s: f64,
}

/// Why renditions are not aligned. `rendition` is the index in the slice given to
/// [`check_aligned`]; rendition 0 is the reference the others are compared with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlignmentError {
    /// No renditions were given.
    #[error("no renditions to align")]
    NoRenditions,
    /// A rendition has no key frame at all.
    #[error("rendition {rendition} has no key frame")]
    NoKeyFrames {
        /// The rendition.
        rendition: usize,
    },
    /// A key frame time of `rendition` has no match in the reference (or the reference has
    /// one `rendition` lacks): `time_s` is the first such time.
    #[error(
        "rendition {rendition}'s key frames are not aligned with rendition 0's: first \
         mismatch at {time_s:.3} s (tolerance {tolerance_s:.3} s)"
    )]
    Misaligned {
        /// The rendition.
        rendition: usize,
        /// The first key-frame time (of either rendition) without a partner, seconds.
        time_s: f64,
        /// The tolerance used, seconds.
        tolerance_s: f64,
    },
    /// The durations differ by more than the tolerance.
    #[error(
        "rendition {rendition} lasts {duration_s:.3} s but rendition 0 lasts \
         {expected_s:.3} s"
    )]
    Duration {
        /// The rendition.
        rendition: usize,
        /// Its duration, seconds.
        duration_s: f64,
        /// Rendition 0's duration, seconds.
        expected_s: f64,
    },
}

/// `|diff| <= tol`, false for NaN.
fn within(diff: f64, tol: f64) -> bool {
    diff.abs() <= tol
}

/// Checks that every rendition's key frames match rendition 0's one to one (each pair
/// within `tol.boundary_s`) and that durations match within `tol.duration_s`. Returns
/// the common boundary times (rendition 0's). Pure; `O(total points)`.
pub fn check_aligned(
    renditions: &[RenditionTiming<'_>],
    tol: Tolerance,
) -> Result<Vec<f64>, AlignmentError> {
    let reference = renditions.first().ok_or(AlignmentError::NoRenditions)?;
    for (i, r) in renditions.iter().enumerate() {
        if r.key_times_s.is_empty() {
            return Err(AlignmentError::NoKeyFrames { rendition: i });
        }
        let mismatch = reference
            .key_times_s
            .iter()
            .zip(r.key_times_s)
            .find(|(a, b)| !within(**a - **b, tol.boundary_s))
            .map(|(a, b)| a.min(*b));
        let n = reference.key_times_s.len().min(r.key_times_s.len());
        let extra = || {
            let a = reference.key_times_s.get(n).copied();
            let b = r.key_times_s.get(n).copied();
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        if let Some(time_s) = mismatch.or_else(extra) {
            return Err(AlignmentError::Misaligned {
                rendition: i,
                time_s,
                tolerance_s: tol.boundary_s,
            });
        }
        if !within(r.duration_s - reference.duration_s, tol.duration_s) {
            return Err(AlignmentError::Duration {
                rendition: i,
                duration_s: r.duration_s,
                expected_s: reference.duration_s,
            });
        }
    }
    Ok(reference.key_times_s.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gop_times(n: usize, gop_s: f64, jitter: &[f64]) -> Vec<f64> {
        (0..n)
            .map(|i| i as f64 * gop_s + jitter.get(i).copied().unwrap_or(0.0))
            .collect()
    }

    const TOL: Tolerance = Tolerance {
        boundary_s: 0.02,
        duration_s: 0.14,
    };

    #[test]
    fn examples() {
        let a = gop_times(5, 2.0, &[]);
        let b = gop_times(5, 2.0, &[0.0, 0.0214, 0.0214]);
        let c = gop_times(4, 2.5, &[]);
        fn r(t: &[f64], d: f64) -> RenditionTiming<'_> {
            RenditionTiming {
                key_times_s: t,
                duration_s: d,
            }
        }
        assert_eq!(check_aligned(&[], TOL), Err(AlignmentError::NoRenditions));
        assert_eq!(
            check_aligned(&[r(&a, 10.0), r(&a, 10.05)], TOL),
            Ok(a.clone())
        );
        let e = check_aligned(&[r(&a, 10.0), r(&a, 10.0), r(&c, 10.0)], TOL).unwrap_err();
        assert_eq!(
            e,
            AlignmentError::Misaligned {
                rendition: 2,
                time_s: 2.0,
                tolerance_s: 0.02
            }
        );
        assert!(e.to_string().contains("rendition 2") && e.to_string().contains("2.000 s"));
        let e = check_aligned(&[r(&a, 10.0), r(&b, 10.0)], TOL).unwrap_err();
        assert!(
            matches!(e, AlignmentError::Misaligned { rendition: 1, time_s, .. } if time_s == 2.0)
        );
        let e = check_aligned(&[r(&a, 10.0), r(&a[..4], 10.0)], TOL).unwrap_err();
        assert!(
            matches!(e, AlignmentError::Misaligned { rendition: 1, time_s, .. } if time_s == 8.0)
        );
        let e = check_aligned(&[r(&a, 10.0), r(&a, 12.0)], TOL).unwrap_err();
        assert!(matches!(e, AlignmentError::Duration { rendition: 1, .. }));
        let e = check_aligned(&[r(&a, 10.0), r(&[], 10.0)], TOL).unwrap_err();
        assert_eq!(e, AlignmentError::NoKeyFrames { rendition: 1 });
        let nan = [f64::NAN];
        assert!(check_aligned(&[r(&a, 10.0), r(&nan, 10.0)], TOL).is_err());
        assert_eq!(Tolerance::for_frame_rate(25.0).boundary_s, 0.02);
        assert_eq!(Tolerance::for_frame_rate(f64::NAN).boundary_s, 0.02);
    }

    proptest! {
        /// Renditions whose key frames differ by less than the tolerance are aligned; moving
        /// one key frame of one rendition by more than the tolerance is refused, naming
        /// that rendition and the first time that no longer matches.
        #[test]
        fn jitter_within_tolerance_passes_and_a_shift_is_named(
            n in 1usize..40,
            renditions in 1usize..6,
            jitter in proptest::collection::vec(-0.0199f64..0.0199, 0..240),
            victim in any::<prop::sample::Index>(),
            point in any::<prop::sample::Index>(),
            // Past the tolerance plus the largest jitter, so the moved key frame is off.
            shift in 0.041f64..5.0,
            sign in any::<bool>(),
        ) {
            let tol = Tolerance::for_frame_rate(25.0);
            let times: Vec<Vec<f64>> = (0..renditions)
                .map(|r| {
                    let j: Vec<f64> = if r == 0 { Vec::new() } else {
                        jitter.iter().skip(r * n).take(n).copied().collect()
                    };
                    gop_times(n, 2.0, &j).into_iter().map(|t| t.max(0.0)).collect()
                })
                .collect();
            let timing: Vec<RenditionTiming<'_>> = times
                .iter()
                .map(|t| RenditionTiming { key_times_s: t, duration_s: 2.0 * n as f64 })
                .collect();
            prop_assert_eq!(check_aligned(&timing, tol), Ok(times[0].clone()));

            let v = victim.index(renditions.max(2) - 1) + 1;
            let p = point.index(n);
            let mut moved = times.clone();
            moved.resize(renditions.max(2), times[0].clone());
            let delta = if sign { shift } else { -shift };
            let old = moved[v][p];
            moved[v][p] = old + delta;
            let timing: Vec<RenditionTiming<'_>> = moved
                .iter()
                .map(|t| RenditionTiming { key_times_s: t, duration_s: 2.0 * n as f64 })
                .collect();
            match check_aligned(&timing, tol) {
                Err(AlignmentError::Misaligned { rendition, time_s, .. }) => {
                    prop_assert_eq!(rendition, v);
                    prop_assert_eq!(time_s, times[0][p].min(old + delta));
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
