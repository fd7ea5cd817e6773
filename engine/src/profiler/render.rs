//! What `%profile` shows: a summary table (text, for terminals) and a timeline (SVG drawn
//! with plotters, for Jupyter): one row per thread and nesting depth, one bar per event,
//! coloured by category.

use super::{Profile, TraceEvent};
use crate::error::{Error, Result};
use crate::magic::format_time;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Wall time covered by the events, in µs (first start to last end).
pub fn wall_us(p: &Profile) -> f64 {
    let start = p.events.iter().map(|e| e.ts_us).fold(f64::INFINITY, f64::min);
    let end = p.events.iter().map(|e| e.ts_us + e.dur_us).fold(0.0, f64::max);
    if start.is_finite() { end - start } else { 0.0 }
}

/// The summary table: one row per (category, name), by total time, with calls, total,
/// mean and share of the profile's wall time.
pub fn summary_table(p: &Profile) -> String {
    let mut rows: Vec<(&'static str, String, usize, f64)> = Vec::new();
    for e in &p.events {
        match rows.iter_mut().find(|r| r.0 == e.cat && r.1 == e.name) {
            Some(r) => {
                r.2 += 1;
                r.3 += e.dur_us;
            }
            None => rows.push((e.cat, e.name.clone(), 1, e.dur_us)),
        }
    }
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    let wall = wall_us(p);
    let mut t = format!("{:<9} {:<36} {:>6} {:>10} {:>10} {:>7}\n", "category", "name", "calls", "total", "mean", "% wall");
    for (cat, name, n, total) in &rows {
        let name = if name.chars().count() > 36 { format!("{}…", name.chars().take(35).collect::<String>()) } else { name.clone() };
        t.push_str(&format!(
            "{cat:<9} {name:<36} {n:>6} {:>10} {:>10} {:>6.1}%\n",
            format_time(total * 1e-6),
            format_time(total * 1e-6 / *n as f64),
            if wall > 0.0 { 100.0 * total / wall } else { 0.0 }
        ));
    }
    t.push_str(&format!("{} events on {} thread(s) in {}", p.events.len(), p.threads.len(), format_time(wall * 1e-6)));
    if p.events.is_empty() {
        t.push_str(
            "\n(nothing was traced, compiled, run or annotated: the profiler records the engine's work, \
             such as calls of jitted functions and eager array operations, and TraceAnnotation spans; \
             plain Rust code is not timed: use %time or %timeit)",
        );
    }
    t
}

fn color(cat: &str) -> RGBColor {
    match cat {
        "jit" => RGBColor(90, 130, 200),
        "trace" => RGBColor(240, 160, 60),
        "lower" => RGBColor(230, 200, 70),
        "compile" => RGBColor(215, 80, 70),
        "execute" => RGBColor(80, 170, 90),
        "transfer" => RGBColor(150, 100, 190),
        "user" => RGBColor(60, 180, 190),
        _ => RGBColor(160, 160, 160),
    }
}

/// Rows of the timeline: `(tid, depth)` per event (a span inside another on the same
/// thread goes one row down), and the row list in drawing order.
fn layout(p: &Profile) -> (Vec<usize>, Vec<(u64, usize)>) {
    let mut rows: Vec<(u64, usize)> = Vec::new();
    let mut open: std::collections::HashMap<u64, Vec<f64>> = std::collections::HashMap::new();
    let mut depth_of = Vec::with_capacity(p.events.len());
    for e in &p.events {
        let stack = open.entry(e.tid).or_default();
        while stack.last().is_some_and(|&end| end <= e.ts_us) {
            stack.pop();
        }
        depth_of.push((e.tid, stack.len()));
        stack.push(e.ts_us + e.dur_us);
    }
    for (t, _) in &p.threads {
        let max = depth_of.iter().filter(|(tid, _)| tid == t).map(|(_, d)| *d).max();
        if let Some(m) = max {
            rows.extend((0..=m).map(|d| (*t, d)));
        }
    }
    let idx = depth_of.iter().map(|k| rows.iter().position(|r| r == k).unwrap_or(0)).collect();
    (idx, rows)
}

/// The timeline as an SVG document (x: ms since the first event; one row per thread and
/// depth, labelled with the thread's name). Errors: drawing failed (plotters' message).
pub fn svg_timeline(p: &Profile) -> Result<String> {
    let (row_of, rows) = layout(p);
    let t0 = p.events.iter().map(|e| e.ts_us).fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    let end_ms = (wall_us(p) / 1e3).max(1e-3);
    let n = rows.len().max(1);
    let mut svg = String::new();
    let err = |e: &dyn std::fmt::Display| Error::runtime(format!("cannot draw the timeline: {e}"));
    {
        let root = SVGBackend::with_string(&mut svg, (960, 60 + 26 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .build_cartesian_2d(0f64..end_ms, 0f64..n as f64)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("ms")
            .x_label_formatter(&|v| format!("{v:.3}"))
            .draw()
            .map_err(|e| err(&e))?;
        let y = |row: usize| (n - 1 - row) as f64;
        chart
            .draw_series(p.events.iter().zip(&row_of).map(|(e, &r)| {
                let x0 = (e.ts_us - t0) / 1e3;
                let x1 = x0 + (e.dur_us / 1e3).max(end_ms * 1e-3);
                Rectangle::new([(x0, y(r) + 0.1), (x1, y(r) + 0.9)], color(e.cat).filled())
            }))
            .map_err(|e| err(&e))?;
        let labelled: Vec<(&TraceEvent, usize)> =
            p.events.iter().zip(row_of.iter().copied()).filter(|(e, _)| e.dur_us / 1e3 > end_ms * 0.08).collect();
        chart
            .draw_series(labelled.iter().map(|(e, r)| {
                Text::new(e.name.clone(), ((e.ts_us - t0) / 1e3, y(*r) + 0.7), ("sans-serif", 11).into_font().color(&BLACK))
            }))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(rows.iter().enumerate().filter(|(_, (_, d))| *d == 0).map(|(i, (t, _))| {
                let name = p.threads.iter().find(|(id, _)| id == t).map(|(_, n)| n.clone()).unwrap_or_default();
                Text::new(format!("thread {t}: {name}"), (end_ms * 0.995, y(i) + 0.98), ("sans-serif", 10).into_font().color(&RGBColor(90, 90, 90)).pos(Pos::new(HPos::Right, VPos::Top)))
            }))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
