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

fn count_into(j: &Jaxpr, counts: &mut HashMap<Option<(String, u32)>, usize>, total: &mut usize) {
    for e in &j.eqns {
        *total += 1;
        *counts.entry(e.source.as_ref().map(|s| (s.file.clone(), s.line))).or_insert(0) += 1;
        for sub in e.primitive.sub_jaxprs() {
            count_into(sub, counts, total);
        }
    }
}

/// Counts `j`'s equations per source line.
pub fn eqn_counts(name: &str, j: &Jaxpr) -> EqnCounts {
    let mut counts = HashMap::new();
    let mut total = 0;
    count_into(j, &mut counts, &mut total);
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

/// The warning for a trace in which one line staged `UNROLLED_LINE_EQNS` or more
/// equations (a Rust loop unrolled into the trace), naming the line; `None` otherwise.
pub fn unrolled_loop_warning(name: &str, j: &Jaxpr) -> Option<String> {
    let mut counts: HashMap<&SourceInfo, usize> = HashMap::new();
    // Only the top level: equations inside a fori_loop/scan body are traced once.
    for e in &j.eqns {
        if let Some(s) = &e.source {
            *counts.entry(s).or_insert(0) += 1;
        }
    }
    let (site, n) = counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.line.cmp(&a.0.line)))?;
    (n >= UNROLLED_LINE_EQNS).then(|| {
        format!(
            "tracing {name} staged {n} of its {} equations at {}: a Rust loop around that line is unrolled \
             into the trace (its body is traced once per iteration), which makes tracing and compiling slow. \
             Use lax::fori_loop or lax::scan to trace the body once.",
            j.eqns.len(),
            site.line_label()
        )
    })
}
