//! HLS segments of an MPEG-TS title: its byte range cut at random-access points, 2 to 6
//! seconds each where the points allow. The server's playlists use these cuts, and so
//! does an encrypted ingest (issue 32: each segment encrypted on its own), so both agree.

/// Segments are cut at random-access points at least this long apart when the points allow.
pub const MIN_SEGMENT_S: f64 = 2.0;
/// A segment is cut short of [`MIN_SEGMENT_S`] rather than grow past this (a single gap
/// between two points longer than this stays one segment).
pub const MAX_SEGMENT_S: f64 = 6.0;
/// One segment of a playlist: `[offset, offset + len)` of the content, `duration_s` long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    /// First byte.
    pub offset_bytes: u64,
    /// Length, bytes.
    pub len_bytes: u64,
    /// Start, seconds (the time of the point it starts at; the first point's for the first).
    pub start_s: f64,
    /// Duration, seconds.
    pub duration_s: f64,
}

/// Cuts `[0, size_bytes)` at random-access points `(time_s, offset_bytes)` (increasing)
/// into segments of [`MIN_SEGMENT_S`]..[`MAX_SEGMENT_S`] where the points allow: a point
/// is a cut when the segment so far lasts at least the minimum, or when going on to the
/// next point would pass the maximum. The first segment starts at byte 0 (the tables
/// before the first point), the last ends at `size_bytes`, lasting until `duration_s`.
pub fn segments(points: &[(f64, u64)], size_bytes: u64, duration_s: f64) -> Vec<Segment> {
    let usable: Vec<(f64, u64)> = points
        .iter()
        .copied()
        .filter(|&(t, o)| t.is_finite() && o < size_bytes)
        .collect();
    let mut cuts: Vec<(f64, u64)> = vec![(usable.first().map_or(0.0, |p| p.0), 0)];
    for (i, &(t, o)) in usable.iter().enumerate().skip(1) {
        let (start_t, start_o) = cuts[cuts.len() - 1];
        if o <= start_o || t <= start_t {
            continue;
        }
        let next_t = usable.get(i + 1).map_or(duration_s, |p| p.0);
        if t - start_t >= MIN_SEGMENT_S || next_t - start_t > MAX_SEGMENT_S {
            cuts.push((t, o));
        }
    }
    let mut out = Vec::with_capacity(cuts.len());
    for (i, &(t, o)) in cuts.iter().enumerate() {
        let (end_t, end_o) = cuts
            .get(i + 1)
            .copied()
            .unwrap_or((duration_s.max(t), size_bytes));
        out.push(Segment {
            offset_bytes: o,
            len_bytes: end_o - o,
            start_s: t,
            duration_s: (end_t - t).max(0.0),
        });
    }
    out.retain(|s| s.len_bytes > 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, u64)]) -> Vec<(f64, u64)> {
        v.to_vec()
    }

    #[test]
    fn cuts_every_two_seconds_of_points_and_covers_the_object() {
        let points: Vec<(f64, u64)> = (0..10).map(|i| (i as f64 * 2.0, 564 + i * 1000)).collect();
        let segs = segments(&points, 10_500, 20.0);
        assert_eq!(segs.len(), 10);
        assert_eq!(segs[0].offset_bytes, 0);
        assert_eq!(segs[0].len_bytes, 1564);
        assert_eq!(segs[9].offset_bytes + segs[9].len_bytes, 10_500);
        for w in segs.windows(2) {
            assert_eq!(w[0].offset_bytes + w[0].len_bytes, w[1].offset_bytes);
        }
        assert!(segs.iter().all(|s| (s.duration_s - 2.0).abs() < 1e-9));
    }

    #[test]
    fn merges_close_points_and_keeps_long_gaps_whole() {
        // Points every 0.5 s merge into 2 s segments; a 9 s gap stays one segment.
        let mut points: Vec<(f64, u64)> = (0..9).map(|i| (i as f64 * 0.5, i * 100)).collect();
        points.push((13.0, 5000));
        points.push((15.0, 6000));
        let segs = segments(&pts(&points), 7000, 17.0);
        let durs: Vec<f64> = segs.iter().map(|s| s.duration_s).collect();
        assert_eq!(durs, [2.0, 2.0, 9.0, 2.0, 2.0]);
        assert_eq!(segs[2].offset_bytes, 800);
    }

    #[test]
    fn never_grows_past_six_seconds_when_a_cut_exists() {
        // 1.5 s then a 5 s gap: cut at 1.5 s rather than make a 6.5 s segment.
        let points = pts(&[(0.0, 0), (1.5, 100), (6.5, 200), (8.5, 300)]);
        let segs = segments(&points, 400, 10.5);
        let durs: Vec<f64> = segs.iter().map(|s| s.duration_s).collect();
        assert_eq!(durs, [1.5, 5.0, 2.0, 2.0]);
    }

    #[test]
    fn no_points_is_one_segment_and_bad_points_are_skipped() {
        let segs = segments(&[], 1000, 4.0);
        assert_eq!(
            segs,
            [Segment {
                offset_bytes: 0,
                len_bytes: 1000,
                start_s: 0.0,
                duration_s: 4.0
            }]
        );
        let segs = segments(&pts(&[(0.0, 0), (f64::NAN, 10), (3.0, 5000)]), 1000, 4.0);
        assert_eq!(segs.len(), 1);
    }
}
