//! Rung timelines as figures (issue 31, docs/benchmarks.md): a player's rung against time,
//! recorded by a test run into a small JSON file each (`ISNODE_TIMELINES_DIR`: the stock
//! players' `stock_players.rs` and `isnode play`'s `rung_switch.rs`), drawn as steps with
//! [`crate::plot`] by `isnode bench timelines`.

use serde::{Deserialize, Serialize};

use crate::plot::{self, Chart, LineStyle, Series};

/// Most points a recorded timeline may have.
pub const MAX_POINTS: usize = 10_000;

/// One recorded timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The player and what it played (the legend).
    pub name: String,
    /// `(seconds from the start, rung)`: each switch, the first one the start.
    pub points: Vec<(f64, f64)>,
    /// Seconds from the start when the run ended (the last rung held until then).
    pub end_s: f64,
    /// What happened to the link, `(seconds, what)`: for the subtitle.
    #[serde(default)]
    pub events: Vec<(f64, String)>,
}

impl Timeline {
    /// Refuses a timeline that cannot be drawn: too many points, a time or rung that is not
    /// finite and non-negative, or times that go back.
    pub fn check(&self) -> Result<(), String> {
        if self.points.len() > MAX_POINTS {
            return Err(format!("{}: more than {MAX_POINTS} points", self.name));
        }
        let finite = |v: f64| v.is_finite() && v >= 0.0;
        let ok = self.points.iter().all(|&(t, r)| finite(t) && finite(r))
            && self.points.windows(2).all(|w| w[1].0 >= w[0].0)
            && finite(self.end_s);
        match ok {
            true => Ok(()),
            false => Err(format!(
                "{}: times or rungs out of order or range",
                self.name
            )),
        }
    }

    /// Its points as steps held until its end.
    fn series(&self) -> Series {
        let mut points = self.points.clone();
        if let Some(&(t, r)) = points.last() {
            if self.end_s > t {
                points.push((self.end_s, r));
            }
        }
        Series {
            name: self.name.clone(),
            points,
        }
    }
}

/// The figure of `timelines`: rung (`y_label`) against seconds from each run's start, as
/// steps; the subtitle lists the first timeline's link events.
pub fn plot(title: &str, y_label: &str, timelines: &[Timeline]) -> String {
    let subtitle = timelines
        .first()
        .map(|t| {
            t.events
                .iter()
                .map(|(s, what)| format!("{what} at {s:.1} s"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let chart = Chart {
        title: title.to_string(),
        subtitle,
        x_label: "seconds from the start of the run".to_string(),
        y_label: y_label.to_string(),
    };
    let series: Vec<Series> = timelines.iter().map(Timeline::series).collect();
    plot::lines(&chart, &series, LineStyle::Steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_is_drawn_as_steps_held_to_its_end_and_bad_ones_are_refused() {
        let t = Timeline {
            name: "hls.js on isnode".into(),
            points: vec![(0.5, 234.0), (6.6, 1080.0), (20.7, 234.0)],
            end_s: 48.0,
            events: vec![(12.2, "8 -> 1 Mbit/s".into())],
        };
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.series().points.last(), Some(&(48.0, 234.0)));
        let svg = plot("rungs", "video height, px", std::slice::from_ref(&t));
        assert!(svg.contains("<polyline") && svg.contains("8 -&gt; 1 Mbit/s at 12.2 s"));
        let back = Timeline {
            points: vec![(2.0, 1.0), (1.0, 2.0)],
            ..t.clone()
        };
        assert!(back.check().is_err());
        let nan = Timeline {
            points: vec![(f64::NAN, 1.0)],
            ..t
        };
        assert!(nan.check().is_err());
    }
}
