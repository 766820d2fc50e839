//! A small SVG writer for the benchmarks' figures (no plotting dependency): bar charts and
//! line charts with both axes starting at 0, ticks at round steps, axis labels, a title and
//! subtitle, and a legend. Every bar and every marked point carries a `<title>` with its
//! value (a tooltip in a browser, and what the tests look for).

use std::fmt::Write as _;

/// Width of a figure, px.
const WIDTH: f64 = 760.0;
/// Height of a figure, px.
const HEIGHT: f64 = 460.0;
/// Left margin (y tick labels and the y label).
const LEFT: f64 = 80.0;
/// Right margin (the legend).
const RIGHT: f64 = 170.0;
/// Top margin (title and subtitle).
const TOP: f64 = 64.0;
/// Bottom margin (x tick labels and the x label).
const BOTTOM: f64 = 60.0;
/// About this many ticks per axis.
const TICKS: f64 = 5.0;
/// Series colours, in order (colour-blind safe).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

/// The texts of a figure.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title (first line).
    pub title: String,
    /// Subtitle (second line, smaller): the run's key parameters.
    pub subtitle: String,
    /// Label of the x axis (with its unit).
    pub x_label: String,
    /// Label of the y axis (with its unit).
    pub y_label: String,
}

/// One line of a line chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its points, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// How a line chart joins its points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStyle {
    /// Straight segments, every point marked.
    Marked,
    /// Horizontal then vertical steps, no markers (a CDF).
    Steps,
}

/// `&`, `<`, `>` and quotes escaped for XML text and attributes.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// A round tick step and the axis top (a multiple of it) for data up to `max` (axis from 0).
pub fn ticks(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / TICKS;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (step, (max / step - 1e-9).ceil().max(1.0) * step)
}

/// `v` with as many decimals as `step` needs.
fn label(v: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(6) as usize;
    format!("{v:.decimals$}")
}

/// A value as written on a bar: whole numbers without decimals, others with three.
fn value(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The plotting area and its scales.
struct Frame {
    x_top: f64,
    y_top: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        LEFT + (v / self.x_top).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, v: f64) -> f64 {
        HEIGHT - BOTTOM - (v / self.y_top).clamp(0.0, 1.0) * (HEIGHT - TOP - BOTTOM)
    }
}

/// The opening, the titles, the axes' labels and the y ticks with their grid lines.
fn head(o: &mut String, c: &Chart, y_max: f64) -> (f64, f64) {
    let (step, top) = ticks(y_max);
    let _ = write!(
        o,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"16\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{}\" y=\"42\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
         <text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        WIDTH / 2.0,
        escape(&c.title),
        WIDTH / 2.0,
        escape(&c.subtitle),
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 14.0,
        escape(&c.x_label),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(&c.y_label),
    );
    let f = Frame {
        x_top: 1.0,
        y_top: top,
    };
    let mut v = 0.0;
    while v <= top + step * 1e-6 {
        let y = f.y(v);
        let _ = writeln!(
            o,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            label(v, step)
        );
        v += step;
    }
    (step, top)
}

/// The two axis lines, and the end of the document.
fn tail(o: &mut String) {
    let _ = write!(
        o,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n</svg>\n",
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT,
    );
}

/// A bar chart: one bar per `(name, value)`, its value written above it.
pub fn bars(c: &Chart, bars: &[(String, f64)]) -> String {
    let mut o = String::new();
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let (_, top) = head(&mut o, c, max);
    let f = Frame {
        x_top: 1.0,
        y_top: top,
    };
    let slot = (WIDTH - LEFT - RIGHT) / bars.len().max(1) as f64;
    for (i, (name, v)) in bars.iter().enumerate() {
        let x = LEFT + slot * (i as f64 + 0.2);
        let (y, base) = (f.y(v.max(0.0)), f.y(0.0));
        let _ = writeln!(
            o,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{col}\">\
             <title>{n}: {val}</title></rect>\
             <text x=\"{mid:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{val}</text>\
             <text x=\"{mid:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\">{n}</text>",
            w = slot * 0.6,
            h = base - y,
            col = COLOURS[i % COLOURS.len()],
            n = escape(name),
            val = value(*v),
            mid = x + slot * 0.3,
            ty = y - 5.0,
            ly = base + 16.0,
        );
    }
    tail(&mut o);
    o
}

/// A line chart of `series` over x from 0 (to the largest x), y from 0, with a legend.
pub fn lines(c: &Chart, series: &[Series], style: LineStyle) -> String {
    let mut o = String::new();
    let all = || series.iter().flat_map(|s| s.points.iter());
    let y_max = all().map(|p| p.1).fold(0.0, f64::max);
    let x_max = all().map(|p| p.0).fold(0.0, f64::max);
    let (_, y_top) = head(&mut o, c, y_max);
    let (x_step, x_top) = ticks(x_max);
    let f = Frame { x_top, y_top };
    let mut v = 0.0;
    while v <= x_top + x_step * 1e-6 {
        let x = f.x(v);
        let _ = writeln!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{t}\" stroke=\"black\"/>\
             <text x=\"{x:.1}\" y=\"{ty}\" text-anchor=\"middle\">{}</text>",
            label(v, x_step),
            b = HEIGHT - BOTTOM,
            t = HEIGHT - BOTTOM + 5.0,
            ty = HEIGHT - BOTTOM + 18.0,
        );
        v += x_step;
    }
    for (i, s) in series.iter().enumerate() {
        let col = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{col}\" stroke-width=\"2\" points=\"{}\"/>",
            path(&f, &s.points, style)
        );
        if style == LineStyle::Marked {
            for (x, y) in &s.points {
                let _ = writeln!(
                    o,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{col}\">\
                     <title>{}: x={x}, y={y}</title></circle>",
                    f.x(*x),
                    f.y(*y),
                    escape(&s.name)
                );
            }
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = WIDTH - RIGHT + 14.0;
        let _ = writeln!(
            o,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{col}\" \
             stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>",
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    tail(&mut o);
    o
}

/// The polyline's points.
fn path(f: &Frame, points: &[(f64, f64)], style: LineStyle) -> String {
    let mut o = String::new();
    let mut last: Option<f64> = None;
    for &(x, y) in points {
        if let (LineStyle::Steps, Some(ly)) = (style, last) {
            let _ = write!(o, "{:.1},{:.1} ", f.x(x), f.y(ly));
        }
        let _ = write!(o, "{:.1},{:.1} ", f.x(x), f.y(y));
        last = Some(y);
    }
    o.trim_end().to_string()
}

/// The empirical CDF of `xs` as step points: (0, 0), then (x_i, i/n) for the sorted values.
pub fn cdf(xs: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    std::iter::once((0.0, 0.0))
        .chain(v.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64 / n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that `doc` is well-formed XML as far as these figures go: every element closed
    /// in order, attribute values quoted, no stray `<` or `&` in text; returns the element
    /// names in document order.
    fn well_formed(doc: &str) -> Result<Vec<String>, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = doc.strip_prefix("<?xml").ok_or("no XML declaration")?;
        rest = &rest[rest.find("?>").ok_or("declaration not closed")? + 2..];
        while let Some(lt) = rest.find('<') {
            check_text(&rest[..lt])?;
            let gt = rest[lt..].find('>').ok_or("a tag not closed")? + lt;
            let tag = &rest[lt + 1..gt];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                if open != name {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
            } else {
                let self_closing = tag.ends_with('/');
                let body = tag.trim_end_matches('/');
                let name = body.split_whitespace().next().ok_or("an empty tag")?;
                if body.matches('"').count() % 2 != 0 || body.contains('<') {
                    return Err(format!("bad attributes in <{tag}>"));
                }
                names.push(name.to_string());
                if !self_closing {
                    stack.push(name.to_string());
                }
            }
            rest = &rest[gt + 1..];
            if stack.is_empty() {
                break;
            }
        }
        check_text(rest)?;
        if !stack.is_empty() || !rest.trim().is_empty() {
            return Err(format!("unclosed {stack:?} or trailing {rest:?}"));
        }
        Ok(names)
    }

    fn check_text(t: &str) -> Result<(), String> {
        for (i, _) in t.match_indices('&') {
            let ent = &t[i..];
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| ent.starts_with(e))
            {
                return Err(format!("a bare & in {t:?}"));
            }
        }
        Ok(())
    }

    fn chart() -> Chart {
        Chart {
            title: "Most valid streams <&> \"nginx\"".into(),
            subtitle: "4 titles, 10 Mbit/s".into(),
            x_label: "concurrent streams".into(),
            y_label: "s / GB".into(),
        }
    }

    #[test]
    fn the_checker_catches_broken_documents() {
        assert!(well_formed("<?xml ?><a><b/></a>").is_ok());
        assert!(well_formed("<?xml ?><a><b></a>").is_err());
        assert!(well_formed("<?xml ?><a>x & y</a>").is_err());
        assert!(well_formed("<?xml ?><a x=\"1></a>").is_err());
    }

    #[test]
    fn bars_are_well_formed_and_carry_their_values() {
        let svg = bars(
            &chart(),
            &[("gso".into(), 120.0), ("nginx <a&b>".into(), 80.0)],
        );
        let names = well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(names.iter().filter(|n| *n == "rect").count(), 3, "bg + 2");
        assert!(svg.contains("<title>gso: 120</title>"), "{svg}");
        assert!(svg.contains("<title>nginx &lt;a&amp;b&gt;: 80</title>"));
        assert!(svg.contains("Most valid streams &lt;&amp;&gt; &quot;nginx&quot;"));
        // The y axis starts at 0 and reaches past the tallest bar.
        assert!(svg.contains(">0</text>") && svg.contains(">120</text>"));
    }

    #[test]
    fn lines_mark_every_point_and_steps_draw_a_cdf() {
        let s = vec![
            Series {
                name: "gso".into(),
                points: vec![(50.0, 1.5), (100.0, 1.25), (200.0, 1.0)],
            },
            Series {
                name: "nginx".into(),
                points: vec![(50.0, 0.25)],
            },
        ];
        let svg = lines(&chart(), &s, LineStyle::Marked);
        let names = well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(names.iter().filter(|n| *n == "circle").count(), 4);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 2);
        for (x, y) in [(50.0, 1.5), (100.0, 1.25), (200.0, 1.0)] {
            assert!(svg.contains(&format!("<title>gso: x={x}, y={y}</title>")));
        }
        // x from 0 to 200 in the plot's width; y from 0.
        let f = Frame {
            x_top: 200.0,
            y_top: 1.5,
        };
        assert_eq!(f.x(0.0), LEFT);
        assert_eq!(f.x(200.0), WIDTH - RIGHT);
        assert_eq!(f.y(0.0), HEIGHT - BOTTOM);
        let p = cdf(&[0.3, 0.1, 0.2, 0.2]);
        assert_eq!(
            p,
            vec![(0.0, 0.0), (0.1, 0.25), (0.2, 0.5), (0.2, 0.75), (0.3, 1.0)]
        );
        let svg = lines(
            &chart(),
            &[Series {
                name: "cdf".into(),
                points: p,
            }],
            LineStyle::Steps,
        );
        well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert!(!svg.contains("<circle"));
    }

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        assert_eq!(ticks(120.0), (25.0, 125.0));
        assert_eq!(ticks(1.0), (0.2, 1.0));
        assert_eq!(ticks(0.0), (0.2, 1.0), "an empty axis still has a scale");
        assert_eq!(ticks(7.0), (2.0, 8.0));
        assert_eq!(label(0.25, 0.25), "0.25");
        assert_eq!(label(0.4, 0.2), "0.4");
        assert_eq!(label(125.0, 25.0), "125");
    }
}
