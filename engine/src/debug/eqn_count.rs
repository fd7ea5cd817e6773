//! Equation counts per source line (JAX's `eqn_count_pprof` dump, as a table) and the
//! warning for a trace made large by an unrolled Rust loop.
//!
//! Every equation carries the user's line that staged it (`#[track_caller]`), so a Rust
//! `for` loop around traced code shows up as one line owning many equations: its body
//! was traced once per iteration. `lax::fori_loop`/`lax::scan` trace it once.

use crate::ir::{Jaxpr, SourceInfo};
use std::collections::HashMap;
use std::fmt;

/// How many equations each source line staged, most first (sub-jaxprs of control flow
/// included, each equation counted at its own line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EqnCounts {
    /// The function's name (`jit(f)`), for the header.
    pub name: String,
    /// All equations, nested ones included.
    pub total: usize,
    /// `(line, count)` with the line as `cell N, line L` (REPL) or `file:line`, largest count first, then by file and line; equations with
    /// no source (made by a transformation) are counted under `<unknown>`.
    pub rows: Vec<(String, usize)>,
}

/// Counts the equations of `j` into `counts`; an equation the engine staged itself (a
/// loop counter's add inside a `fori_loop` body: its location is an engine source) counts
/// at `outer`, the line of the control-flow equation around it (the user's `fori_loop`).
fn count_into(j: &Jaxpr, counts: &mut HashMap<Option<(String, u32)>, usize>, total: &mut usize, outer: Option<&SourceInfo>) {
    for e in &j.eqns {
        *total += 1;
        let source = match (&e.source, outer) {
            (Some(s), Some(o)) if crate::error::engine_file(&s.file) => Some(o),
            (s, _) => s.as_ref(),
        };
        *counts.entry(source.map(|s| (s.file.clone(), s.line))).or_insert(0) += 1;
        for sub in e.primitive.sub_jaxprs() {
            count_into(sub, counts, total, source);
        }
    }
}

/// Counts `j`'s equations per source line.
pub fn eqn_counts(name: &str, j: &Jaxpr) -> EqnCounts {
    let mut counts = HashMap::new();
    let mut total = 0;
    count_into(j, &mut counts, &mut total, None);
    let mut rows: Vec<(Option<(String, u32)>, usize)> = counts.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rows = rows
        .into_iter()
        .map(|(k, n)| {
            let label = k.map_or_else(|| "<unknown>".to_string(), |(file, line)| SourceInfo { file, line, column: 0 }.line_label());
            (label, n)
        })
        .collect();
    EqnCounts { name: name.to_string(), total, rows }
}

impl fmt::Display for EqnCounts {
    /// `pprof -top`-like: count, share of all equations, line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {} equation{}", self.name, self.total, if self.total == 1 { "" } else { "s" })?;
        writeln!(f, "{:>8} {:>7}  line", "eqns", "share")?;
        for (line, n) in &self.rows {
            let share = 100.0 * *n as f64 / self.total.max(1) as f64;
            writeln!(f, "{n:>8} {share:>6.2}%  {line}")?;
        }
        Ok(())
    }
}

/// A line must stage at least this many equations before the unrolled-loop warning.
pub const UNROLLED_LINE_EQNS: usize = 100;

/// A line staging at least this many equations, in the same file as the line that set off
/// the warning, counts as part of the unrolled loop's body (a body of several lines has
/// each line traced once per iteration).
pub const UNROLLED_BODY_LINE_EQNS: usize = 10;

/// The warning for a trace in which one line staged `UNROLLED_LINE_EQNS` or more
/// equations (a Rust loop unrolled into the trace), naming the loop's lines: the line
/// that staged the most and every line of the same file that staged
/// `UNROLLED_BODY_LINE_EQNS` or more (`cell 3, line 4`, or `cell 3, lines 3-5` with the
/// equations of all of them); `None` otherwise.
pub fn unrolled_loop_warning(name: &str, j: &Jaxpr) -> Option<String> {
    let mut counts: HashMap<(&str, u32), (usize, &SourceInfo)> = HashMap::new();
    // Only the top level: equations inside a fori_loop/scan body are traced once.
    for e in &j.eqns {
        if let Some(s) = &e.source {
            counts.entry((s.file.as_str(), s.line)).or_insert((0, s)).0 += 1;
        }
    }
    let (&(file, _), &(n, site)) = counts.iter().max_by(|a, b| a.1.0.cmp(&b.1.0).then_with(|| b.0.1.cmp(&a.0.1)))?;
    if n < UNROLLED_LINE_EQNS {
        return None;
    }
    let body: Vec<(u32, usize)> = counts
        .iter()
        .filter(|((f, _), (c, _))| *f == file && *c >= UNROLLED_BODY_LINE_EQNS)
        .map(|((_, l), (c, _))| (*l, *c))
        .collect();
    let staged: usize = body.iter().map(|b| b.1).sum();
    let (first, last) = (body.iter().map(|b| b.0).min()?, body.iter().map(|b| b.0).max()?);
    let (at, those) = if body.len() == 1 {
        (site.line_label(), "that line")
    } else {
        let lines = format!("lines {first}-{last}");
        let label = match site.cell() {
            Some(c) => format!("cell {c}, {lines}"),
            None => format!("{}:{first}-{last}", site.file),
        };
        (label, "those lines")
    };
    Some(format!(
        "tracing {name} staged {staged} of its {} equations at {at}: a Rust loop around {those} is unrolled \
         into the trace (its body is traced once per iteration), which makes tracing and compiling slow. \
         Use lax::fori_loop or lax::scan to trace the body once.",
        j.eqns.len(),
    ))
}
