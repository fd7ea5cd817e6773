//! Headless runs: a notebook (`.ipynb`) or a `.rs` script of cells separated by `// %%`
//! lines, executed cell by cell with every source and output printed; and `--warm`.

use super::term::Printer;
use crate::session::{ExecStatus, Output, Session, SessionOptions};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::time::Instant;

/// Tag (notebook metadata, or after `// %%` in a script) of a cell that may fail.
pub const RAISES_TAG: &str = "raises-exception";

/// One cell to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The Rust source.
    pub source: String,
    /// Whether an error in this cell is expected.
    pub may_fail: bool,
}

/// Reads the code cells of a notebook (any nbformat version the `nbformat` crate reads).
/// Errors: unreadable file or invalid notebook JSON.
pub fn notebook_cells(path: &Path) -> Result<Vec<Cell>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let notebook = match nbformat::parse_notebook(&text)
        .map_err(|e| anyhow::anyhow!("{e:?}"))
        .with_context(|| format!("{} is not a valid notebook", path.display()))?
    {
        nbformat::Notebook::V4(nb) => nb,
        nbformat::Notebook::V4QuirksMode(q) => q.repair(),
        nbformat::Notebook::Legacy(nb) => nbformat::upgrade_legacy_notebook(nb)?,
        nbformat::Notebook::V3(nb) => nbformat::upgrade_v3_notebook(nb)?,
        _ => bail!("{}: unsupported notebook format version", path.display()),
    };
    Ok(notebook
        .cells
        .iter()
        .filter_map(|cell| match cell {
            nbformat::v4::Cell::Code { source, metadata, .. } => Some(Cell {
                source: source.concat(),
                may_fail: metadata
                    .tags
                    .as_ref()
                    .is_some_and(|tags| tags.iter().any(|t| t == RAISES_TAG)),
            }),
            _ => None,
        })
        .collect())
}

/// Splits a `.rs` script into cells at lines starting with `// %%`; such a line may carry
/// the `raises-exception` tag. Blank cells are dropped.
pub fn script_cells(text: &str) -> Vec<Cell> {
    let mut cells = Vec::new();
    let mut current = Cell { source: String::new(), may_fail: false };
    for line in text.split_inclusive('\n') {
        if let Some(marker) = line.trim_start().strip_prefix("// %%") {
            let next_may_fail = marker.contains(RAISES_TAG);
            let done = std::mem::replace(&mut current, Cell { source: String::new(), may_fail: next_may_fail });
            cells.push(done);
        } else {
            current.source.push_str(line);
        }
    }
    cells.push(current);
    cells
        .into_iter()
        .map(|c| Cell { source: c.source.trim_end().to_string(), may_fail: c.may_fail })
        .filter(|c| !c.source.trim().is_empty())
        .collect()
}

/// Runs the notebook or script at `path`, printing each cell (`In [n]:`) and its outputs.
/// Returns false if a cell failed that was not tagged `raises-exception` (the run stops
/// there). Errors: the file cannot be read or parsed, or the session cannot start.
pub fn run_file(path: &Path, opts: SessionOptions) -> Result<bool> {
    let cells = match path.extension().and_then(|e| e.to_str()) {
        Some("ipynb") => notebook_cells(path)?,
        _ => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            script_cells(&text)
        }
    };
    let opts = SessionOptions {
        work_dir: opts.work_dir.or_else(|| path.parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf)),
        ..opts
    };
    let printer = Printer::from_env();
    let mut session = Session::start(opts)?;
    let interrupt = session.interrupt_handle();
    let _ = ctrlc::set_handler(move || interrupt.interrupt());
    let timing = std::env::var_os("JAXREPL_TIMING").is_some();
    for (i, cell) in cells.iter().enumerate() {
        let n = i + 1;
        print_source(n, &cell.source);
        let t0 = Instant::now();
        session.set_execution_count(n as u64);
        let status = session.execute(&cell.source, &mut |o| printer.print(&o));
        if timing {
            eprintln!("[timing] cell {n}: {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
        }
        println!();
        match status {
            ExecStatus::Ok => {}
            _ if cell.may_fail => {}
            ExecStatus::Interrupted => {
                eprintln!("jaxrepl: interrupted in cell {n} of {}", path.display());
                return Ok(false);
            }
            ExecStatus::Error => {
                let how = if path.extension().is_some_and(|e| e == "rs") {
                    format!("start it with the line `// %% {RAISES_TAG}`")
                } else {
                    format!("tag it `{RAISES_TAG}`")
                };
                eprintln!("jaxrepl: cell {n} of {} failed ({how} if that is expected)", path.display());
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn print_source(n: usize, source: &str) {
    let head = format!("In [{n}]: ");
    for (i, line) in source.lines().enumerate() {
        if i == 0 {
            println!("{head}{line}");
        } else {
            println!("{:width$}{line}", "", width = head.len());
        }
    }
    if source.is_empty() {
        println!("{head}");
    }
}

/// `jaxrepl --warm`: start a session, load the prelude and run one trivial engine cell, so
/// the build slot is warm for the next session; prints timings. Errors: the prelude or the
/// cell failed.
pub fn warm(opts: SessionOptions) -> Result<()> {
    let t0 = Instant::now();
    let prelude = opts.prelude;
    let mut session = Session::start(opts)?;
    let slot = session.slot_index();
    let started = t0.elapsed();
    session.wait_ready()?;
    let ready = t0.elapsed();
    let cell = if prelude { "jnp::arange(4.0)" } else { "1 + 1" };
    let t1 = Instant::now();
    let mut errors = Vec::new();
    let status = session.execute(cell, &mut |o| {
        if let Output::Error { .. } = &o {
            errors.push(o.clone());
        }
        Printer::from_env().print(&o)
    });
    let first = t1.elapsed();
    let t2 = Instant::now();
    let _ = session.execute("1 + 1", &mut |_| {});
    let trivial = t2.elapsed();
    eprintln!(
        "jaxrepl --warm: slot {slot}; start {:.0} ms; context+prelude ready {:.1} s; first cell `{cell}` {:.2} s; trivial cell {:.0} ms",
        started.as_secs_f64() * 1e3,
        ready.as_secs_f64(),
        first.as_secs_f64(),
        trivial.as_secs_f64() * 1e3
    );
    if status != ExecStatus::Ok {
        bail!("the warm-up cell `{cell}` failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_splits_on_markers_with_tags() {
        let cells = script_cells("let x = 1;\n// %%\nx + 1\n// %% raises-exception\npanic!(\"no\")\n// %%\n\n");
        assert_eq!(
            cells,
            vec![
                Cell { source: "let x = 1;".into(), may_fail: false },
                Cell { source: "x + 1".into(), may_fail: false },
                Cell { source: "panic!(\"no\")".into(), may_fail: true },
            ]
        );
    }
}
