//! The one line chart of the sim's and the soak's reports: SVG, one coloured line per run or
//! per swept value, x from zero, y from zero with a tenth of headroom.

use std::path::Path;

use crate::error::Error;

/// One line: its legend and its (x, y) points.
pub type Line = (String, Vec<(f64, f64)>);

/// Six colours (matplotlib's first six): a sweep has at most six values; past that they repeat.
const PALETTE: [(u8, u8, u8); 6] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (140, 86, 75),
];

/// Pixels: wide enough for a minute of per-second points, and 80 px of y labels for byte
/// counts in the hundreds of millions.
const SIZE: (u32, u32) = (900, 420);
const Y_LABEL_AREA: u32 = 80;

/// What a chart says about its axes.
#[derive(Debug, Clone, Copy)]
pub struct LineChart<'a> {
    /// The caption above the plot.
    pub title: &'a str,
    /// What x counts (`simulated seconds`, `seconds`).
    pub x_label: &'a str,
    /// What y counts, with its unit; empty when the title says it.
    pub y_label: &'a str,
}

impl LineChart<'_> {
    /// Draws `lines` into an SVG file at `path`.
    pub fn write_svg(&self, path: &Path, lines: &[Line]) -> Result<(), Error> {
        self.draw(path, lines).map_err(|source| Error::Chart {
            path: path.to_owned(),
            source,
        })
    }

    fn draw(
        &self,
        path: &Path,
        lines: &[Line],
    ) -> Result<(), plotters::drawing::DrawingAreaErrorKind<std::io::Error>> {
        use plotters::prelude::*;
        let x_max = lines
            .iter()
            .flat_map(|(_, points)| points.iter().map(|(x, _)| *x))
            .fold(1.0, f64::max);
        let y_max = lines
            .iter()
            .flat_map(|(_, points)| points.iter().map(|(_, y)| *y))
            .fold(1.0, f64::max)
            * 1.1;
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .draw()?;
        for (i, (name, points)) in lines.iter().enumerate() {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            let color = RGBColor(r, g, b);
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        root.present()
    }
}

/// One value of a swept setting: its label on the x axis, and the median and range of the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    pub label: String,
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

/// A value of the sweep marked with a vertical line and named in the legend (the edge, the
/// shipped value).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Index into the points.
    pub at: usize,
    pub name: String,
}

impl LineChart<'_> {
    /// A sweep into an SVG file at `path`: the setting's values evenly spaced across (they are
    /// usually a geometric series; `x_label` names the setting and its unit), the median of each
    /// value's runs joined by a line, the range of the runs as a bar, and `marks`.
    pub fn write_sweep_svg(
        &self,
        path: &Path,
        points: &[SweepPoint],
        marks: &[Mark],
    ) -> Result<(), Error> {
        self.draw_sweep(path, points, marks)
            .map_err(|source| Error::Chart {
                path: path.to_owned(),
                source,
            })
    }

    fn draw_sweep(
        &self,
        path: &Path,
        points: &[SweepPoint],
        marks: &[Mark],
    ) -> Result<(), plotters::drawing::DrawingAreaErrorKind<std::io::Error>> {
        use plotters::prelude::*;
        let y_max = points
            .iter()
            .map(|p| p.high.max(p.median))
            .fold(1e-9, f64::max)
            * 1.15;
        let n = points.len().max(1);
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d((0..n as i32).into_segmented(), 0.0..y_max)?;
        let at = |i: usize| SegmentValue::CenterOf(i as i32);
        let label_of = |x: &SegmentValue<i32>| -> String {
            match x {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => usize::try_from(*i)
                    .ok()
                    .and_then(|i| points.get(i))
                    .map_or_else(String::new, |p| p.label.clone()),
                SegmentValue::Last => String::new(),
            }
        };
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&label_of)
            .disable_x_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .draw()?;
        let (r, g, b) = PALETTE[0];
        let line = RGBColor(r, g, b);
        for (i, mark) in marks.iter().enumerate() {
            let (r, g, b) = PALETTE[(i + 1) % PALETTE.len()];
            let color = RGBColor(r, g, b);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(at(mark.at), 0.0), (at(mark.at), y_max)],
                    color.stroke_width(2 + 2 * i as u32),
                )))?
                .label(mark.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .draw_series(LineSeries::new(
                points.iter().enumerate().map(|(i, p)| (at(i), p.median)),
                line.stroke_width(2),
            ))?
            .label("median of the runs; bar: min to max")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], line.stroke_width(2))
            });
        chart.draw_series(
            points
                .iter()
                .enumerate()
                .map(|(i, p)| Circle::new((at(i), p.median), 4, line.filled())),
        )?;
        chart.draw_series(points.iter().enumerate().map(|(i, p)| {
            PathElement::new(vec![(at(i), p.low), (at(i), p.high)], BLACK.stroke_width(1))
        }))?;
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        root.present()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_names_every_line_in_its_legend() {
        let path = std::env::temp_dir().join(format!("harness-chart-{}.svg", std::process::id()));
        let chart = LineChart {
            title: "fired per second",
            x_label: "seconds",
            y_label: "timers",
        };
        let lines = vec![
            ("shipped".to_owned(), vec![(0.0, 1.0), (1.0, 3.0)]),
            ("naive".to_owned(), vec![(0.0, 2.0), (1.0, 0.0)]),
        ];
        chart.write_svg(&path, &lines).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("written");
        std::fs::remove_file(&path).expect("removed");
        for text in ["fired per second", "shipped", "naive", "seconds", "timers"] {
            assert!(svg.contains(text), "{text} missing from the chart");
        }
    }

    #[test]
    fn a_chart_into_a_missing_directory_is_an_error_naming_the_file() {
        let path = Path::new("/nonexistent-harness-dir/chart.svg");
        let chart = LineChart {
            title: "t",
            x_label: "x",
            y_label: "",
        };
        let error = chart
            .write_svg(path, &[("a".to_owned(), vec![(0.0, 0.0)])])
            .expect_err("no such directory");
        assert!(error.to_string().contains("chart.svg"), "{error}");
    }

    #[test]
    fn a_sweep_chart_labels_its_axes_values_and_marks() {
        let path = std::env::temp_dir().join(format!("harness-sweep-{}.svg", std::process::id()));
        let chart = LineChart {
            title: "QUEEN_SWEEPER_CLAIM_BATCH",
            x_label: "claim batch (rows)",
            y_label: "drain rate (timers/s)",
        };
        let points: Vec<SweepPoint> = [(50, 7_000.0), (200, 13_000.0), (800, 18_000.0)]
            .iter()
            .map(|(v, m)| SweepPoint {
                label: v.to_string(),
                median: *m,
                low: m * 0.9,
                high: m * 1.1,
            })
            .collect();
        let marks = [
            Mark {
                at: 2,
                name: "edge 800".into(),
            },
            Mark {
                at: 1,
                name: "shipped 200".into(),
            },
        ];
        chart
            .write_sweep_svg(&path, &points, &marks)
            .expect("draws");
        let svg = std::fs::read_to_string(&path).expect("written");
        std::fs::remove_file(&path).expect("removed");
        for text in [
            "claim batch (rows)",
            "drain rate (timers/s)",
            "50",
            "200",
            "800",
            "edge 800",
            "shipped 200",
        ] {
            assert!(
                svg.lines().any(|l| l.trim() == text),
                "{text} missing from the chart"
            );
        }
    }
}
