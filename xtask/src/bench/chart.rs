//! bench/converged.png: converged Foos over time, one line per contender, one panel per timed
//! scenario at its largest N. Each line is the contender's median run. The time axis ends a
//! little after the slowest contender that the apiserver paces converged, so that those lines
//! stay readable; the line of a contender paced by its own rate limit (sample-controller) runs
//! off the edge, and its legend says when it converged.

use std::path::Path;
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::model::{Contender, RunResult, Scenario, Spread, capitalised, fastest_concurrency};

pub(super) const FONT: &str = "sans-serif";

pub fn draw(path: &Path, runs: &[RunResult]) -> Result<()> {
    register_font();
    let panels: Vec<Panel> = [Scenario::Backlog, Scenario::Burst]
        .into_iter()
        .filter_map(|scenario| Panel::of(runs, scenario))
        .collect();
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    if panels.is_empty() {
        root.draw(&Text::new("no timed runs yet", (600, 270), (FONT, 24)))
            .map_err(plot_error)?;
    }
    for (area, panel) in root.split_evenly((1, panels.len().max(1))).iter().zip(&panels) {
        panel.draw(area)?;
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

pub(super) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .unwrap_or_else(|_| panic!("the DejaVu Sans font compiled into xtask is not a valid font"));
    });
}

/// One scenario at its largest N, with the median run of each contender.
struct Panel<'a> {
    scenario: Scenario,
    planned_n: usize,
    lines: Vec<&'a RunResult>,
}

impl<'a> Panel<'a> {
    fn of(runs: &'a [RunResult], scenario: Scenario) -> Option<Self> {
        let planned_n = runs
            .iter()
            .filter(|r| r.scenario == Some(scenario) && r.succeeded())
            .map(|r| r.planned_n)
            .max()?;
        let lines = Contender::ALL
            .iter()
            .filter_map(|&c| {
                // A swept contender's line is its fastest concurrency, as in the tables.
                let fastest = fastest_concurrency(runs, c, scenario, planned_n);
                let mine: Vec<&RunResult> = runs
                    .iter()
                    .filter(|r| r.scenario == Some(scenario) && r.planned_n == planned_n)
                    .filter(|r| r.contender == Some(c) && r.succeeded())
                    .filter(|r| fastest.is_none() || r.concurrency == fastest)
                    .collect();
                median_run(&mine)
            })
            .collect();
        Some(Self {
            scenario,
            planned_n,
            lines,
        })
    }

    /// Seconds shown: past the slowest contender that is not rate-limited, or past the slowest
    /// of all when only rate-limited ones ran.
    fn x_end(&self) -> f64 {
        let slowest = |lines: &mut dyn Iterator<Item = &&RunResult>| {
            lines.filter_map(|r| r.seconds).fold(0.0, f64::max)
        };
        let paced_by_apiserver = slowest(&mut self.lines.iter().filter(|r| !is_rate_limited(r)));
        let end = if paced_by_apiserver > 0.0 {
            paced_by_apiserver
        } else {
            slowest(&mut self.lines.iter())
        };
        end.max(0.1) * 1.15
    }

    fn draw(&self, area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>) -> Result<()> {
        let title = format!(
            "{}, N = {}: converged Foos over time",
            capitalised(self.scenario),
            self.planned_n
        );
        let x_end = self.x_end();
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 22))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_end, 0.0..(self.planned_n as f64 * 1.05))
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("converged Foos")
            .y_label_formatter(&|y| format!("{y:.0}"))
            // Without the fine grid the chart is easier to read, and the PNG a third the size.
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(plot_error)?;
        for run in &self.lines {
            let contender = run.contender.expect("runs name their contender");
            let color = color(contender);
            chart
                .draw_series(LineSeries::new(
                    // plotters would clamp points past the axis onto its edge, not leave them out.
                    run.timeline
                        .iter()
                        .take_while(|(t, _)| *t <= x_end)
                        .map(|&(t, c)| (t, c as f64)),
                    color.stroke_width(3),
                ))
                .map_err(plot_error)?
                .label(legend(run, x_end))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        Ok(())
    }
}

/// `sample-operator (ours): 4.2 s`; a run that ends past the axis, or ran fewer Foos, says so.
fn legend(run: &RunResult, x_end: f64) -> String {
    let label = run.contender.map(Contender::label).unwrap_or_default();
    let seconds = run.seconds.unwrap_or(0.0);
    let mut legend = format!("{label}: {seconds:.1} s");
    if run.n != run.planned_n {
        legend = format!("{label}, {} Foos (capped): {seconds:.0} s", run.n);
    }
    if seconds > x_end {
        legend.push_str(" (off the chart)");
    }
    legend
}

/// The run whose time is the median (the lower middle one for an even count).
fn median_run<'a>(runs: &[&'a RunResult]) -> Option<&'a RunResult> {
    let median = Spread::of(runs.iter().filter_map(|r| r.seconds))?.median;
    runs.iter().copied().min_by(|a, b| {
        (a.seconds.unwrap_or(0.0) - median)
            .abs()
            .total_cmp(&(b.seconds.unwrap_or(0.0) - median).abs())
    })
}

fn is_rate_limited(run: &RunResult) -> bool {
    run.contender.is_some_and(Contender::is_rate_limited)
}

fn color(contender: Contender) -> RGBColor {
    match contender {
        Contender::Ours => RGBColor(0xd9, 0x48, 0x1c),
        Contender::OursStreaming => RGBColor(0xf4, 0xa5, 0x82),
        Contender::SampleController => RGBColor(0x1f, 0x77, 0xb4),
        Contender::ControllerRuntime => RGBColor(0x2c, 0xa0, 0x2c),
        Contender::SampleControllerTuned => RGBColor(0x9e, 0xc5, 0xe8),
        Contender::ControllerRuntimeTuned => RGBColor(0x98, 0xdf, 0x8a),
        Contender::OursEventsOff => RGBColor(0x8c, 0x2d, 0x04),
        Contender::OursThreadPerCore => RGBColor(0xb8, 0x6b, 0x3a),
        Contender::OursHttp2 => RGBColor(0xe6, 0x55, 0x0d),
        Contender::Ceiling => RGBColor(0x55, 0x55, 0x55),
        Contender::CeilingOurs => RGBColor(0xaa, 0xaa, 0xaa),
        Contender::CeilingOursStatus => RGBColor(0x88, 0x88, 0x88),
        Contender::CeilingOursStatusMerge => RGBColor(0x77, 0x77, 0x99),
    }
}

pub(super) fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_drawn_without_system_fonts() {
        let run = |contender, seconds: f64| RunResult {
            scenario: Some(Scenario::Backlog),
            contender: Some(contender),
            planned_n: 10,
            n: 10,
            seconds: Some(seconds),
            timeline: (0..=10).map(|i| (i as f64 * seconds / 10.0, i)).collect(),
            ..Default::default()
        };
        let dir = std::env::temp_dir().join(format!("bench-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("converged.png");
        draw(&path, &[run(Contender::Ours, 2.0), run(Contender::Ceiling, 1.5)]).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
