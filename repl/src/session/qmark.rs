//! Errors returned with `?` from a cell, shown as errors like a panic is.
//!
//! evcxr runs a cell that uses `?` inside a closure returning
//! `Result<(), EvcxrUserCodeError>`; its `impl<T: Debug> From<T>` prints the error with
//! evcxr's error format on the child's stderr, and the cell then ends as if it had
//! succeeded (evcxr's own "error occurred" line never reaches us). Invariant kept here: **a
//! cell stopped by `?` is an error output** (an `error` reply in Jupyter), with the error's
//! type name and the user's line. Two lines on the child's stderr carry it:
//! - the session sets evcxr's error format to `{:#?}` (with the engine), and the engine
//!   writes `{:#?}` of a `jax::Error` in a session as [`ERROR_LINE_PREFIX`] + its JSON
//!   (`jax::interactive::error_json`);
//! - [`STOP_HOOK`], put in front of every cell, implements `Drop` for evcxr's error value:
//!   it writes [`STOP_MARKER`] when a `?` ends the cell, right after the error's text.
//!
//! An error line followed by the stop marker becomes the engine's error output; the stop
//! marker alone (a `?` on a non-engine error, printed above as evcxr printed it) becomes an
//! `Error` naming the cell. An error line without the marker (a user's `eprintln!("{e:#?}")`)
//! and error JSON inside a line (`dbg!(result)`) are shown as readable text.

use super::Output;
use super::render;

/// Where the engine's `{:#?}` error line starts (`jax::interactive::ERROR_LINE_PREFIX`;
/// repeated here as the session does not link the engine; both sides test it).
pub const ERROR_LINE_PREFIX: &str = "\x1ejaxrepl-error ";

/// The line [`STOP_HOOK`] writes when a `?` ended the cell.
pub const STOP_MARKER: &str = "\x1ejaxrepl-question-mark";

/// Code put in front of every cell (on the session's first line with
/// `jax::interactive::enter_cell`): evcxr's `EvcxrUserCodeError` is created only by the
/// conversion of a `?`'s error and dropped when the cell's closure has returned it, so
/// its `Drop` runs exactly when a `?` stopped the cell. The `impl` lives in the cell's
/// function body, where each cell's crate has its own `EvcxrUserCodeError`.
pub const STOP_HOOK: &str = "{ #[allow(non_local_definitions)] impl Drop for EvcxrUserCodeError { fn drop(&mut self) { eprintln!(\"\\x1ejaxrepl-question-mark\"); } } }";

/// Set-up code that turns on evcxr's `?` support for the whole session: evcxr adds
/// `EvcxrUserCodeError` only after a cell failed to compile for lack of it (E0277), which
/// this statement does once, so that [`STOP_HOOK`] compiles in every later cell.
pub const ENABLE_QUESTION_MARK: &str = "Ok::<(), std::fmt::Error>(())?;";

/// evcxr's command setting the error format: `{:#?}` makes a `jax::Error` returned with `?`
/// print as the engine's error line.
pub const ERROR_FORMAT_COMMAND: &str = ":efmt {:#?}";

/// Sorts a running cell's stderr lines: engine error lines and stop markers become
/// error outputs (collected in `stops`), the stack-overflow line sets `overflowed`, and
/// every other line goes on to the sink as stderr text or progress.
pub struct StderrRouter {
    /// The engine reported a stack overflow (the child is dying of it).
    pub overflowed: bool,
    /// Errors of `?`s that stopped the cell, in order.
    pub stops: Vec<Output>,
    /// An engine error line not yet followed by the stop marker (its JSON).
    pending: Option<String>,
    /// Where a `?` in the cell is: `cell N, line L` when one line has `?`s, else `cell N`.
    place: String,
}

impl StderrRouter {
    /// A router for cell number `cell` whose text (as the user's lines) is `code`.
    pub fn new(cell: u64, code: &str) -> Self {
        let lines = super::complete::question_mark_lines(code);
        let place = match lines.as_slice() {
            [line] => format!("cell {cell}, line {line}"),
            _ => format!("cell {cell}"),
        };
        StderrRouter { overflowed: false, stops: Vec::new(), pending: None, place }
    }

    /// Handles one line of the child's stderr.
    pub fn route(&mut self, line: String, sink: &mut dyn FnMut(Output)) {
        let bare = line.trim_end();
        if bare == super::exec::STACK_OVERFLOW_MARKER {
            self.overflowed = true;
        } else if bare == STOP_MARKER {
            let stop = match self.pending.take() {
                Some(json) => self.engine_stop(&json),
                None => Output::Error {
                    ename: "Error".into(),
                    evalue: format!("the `?` at {} returned an error (printed above)", self.place),
                    traceback: vec![format!("Error: the `?` at {} returned the error printed above; the cell stopped there", self.place)],
                },
            };
            self.stops.push(stop);
        } else if let Some(json) = line.strip_prefix(ERROR_LINE_PREFIX).filter(|j| is_error_json(j)) {
            self.flush(sink);
            self.pending = Some(json.to_string());
        } else {
            self.flush(sink);
            sink(super::exec::stderr_output(readable(&line)));
        }
    }

    /// Shows a pending engine error line as text (no stop marker followed it).
    pub fn flush(&mut self, sink: &mut dyn FnMut(Output)) {
        if let Some(json) = self.pending.take() {
            sink(Output::Stderr(error_text(&json, "\n") + "\n"));
        }
    }

    fn engine_stop(&self, json: &str) -> Output {
        let mut out = render::engine_error_output(json);
        if let Output::Error { traceback, .. } = &mut out {
            traceback.push(format!("  (returned by `?` at {})", self.place));
        }
        out
    }
}

/// Whether `s` is the engine's error JSON (an object with `ename`).
fn is_error_json(s: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(s).is_ok_and(|v| v["ename"].is_string())
}

/// The engine error JSON `json` as text: its traceback lines (`ValueError: ...`,
/// `  (traced at cell 3, line 2)`) joined by `sep`.
fn error_text(json: &str, sep: &str) -> String {
    match render::engine_error_output(json) {
        Output::Error { traceback, .. } if sep == "\n" => traceback.join(sep),
        Output::Error { traceback, .. } => traceback.iter().map(|l| l.trim()).collect::<Vec<_>>().join(sep),
        _ => json.to_string(),
    }
}

/// `line` with each engine error JSON in it (`{:#?}` of a `jax::Error` inside other
/// output, as `dbg!(f.call(&x))` prints it) replaced by the error's text on one line.
pub fn readable(line: &str) -> String {
    if !line.contains(ERROR_LINE_PREFIX) {
        return line.to_string();
    }
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(ERROR_LINE_PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + ERROR_LINE_PREFIX.len()..];
        let mut values = serde_json::Deserializer::from_str(after).into_iter::<serde_json::Value>();
        match values.next() {
            Some(Ok(v)) if v["ename"].is_string() => {
                let end = values.byte_offset();
                out.push_str(&error_text(&after[..end], " "));
                rest = &after[end..];
            }
            _ => {
                out.push_str(&rest[at..at + ERROR_LINE_PREFIX.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literal the engine's test checks `jax::interactive::error_json` against.
    const ENGINE_JSON: &str = r#"{"ename":"ValueError","evalue":"axis 4 is out of bounds\nfor an array of rank 1","traceback":["ValueError: axis 4 is out of bounds\nfor an array of rank 1","  (traced at cell 3, line 2)"],"location":{"file":"cell 3","line":2,"column":9}}"#;

    fn route_all(cell: u64, code: &str, lines: &[String]) -> (Vec<Output>, StderrRouter) {
        let mut seen = Vec::new();
        let mut r = StderrRouter::new(cell, code);
        for l in lines {
            r.route(l.clone(), &mut |o| seen.push(o));
        }
        r.flush(&mut |o| seen.push(o));
        (seen, r)
    }

    #[test]
    fn an_engine_error_returned_with_question_mark_is_an_error_with_its_lines() {
        let code = "let a = 1;\nlet y = g.call(&x)?;";
        let (seen, r) = route_all(5, code, &[format!("{ERROR_LINE_PREFIX}{ENGINE_JSON}"), STOP_MARKER.to_string()]);
        assert!(seen.is_empty(), "{seen:?}");
        assert_eq!(
            r.stops,
            vec![Output::Error {
                ename: "ValueError".into(),
                evalue: "axis 4 is out of bounds\nfor an array of rank 1".into(),
                traceback: vec![
                    "ValueError: axis 4 is out of bounds\nfor an array of rank 1".into(),
                    "  (traced at cell 3, line 2)".into(),
                    "  (returned by `?` at cell 5, line 2)".into(),
                ],
            }]
        );
    }

    #[test]
    fn a_non_engine_error_names_the_cell_and_stays_printed() {
        let code = "let n: i32 = \"x?\".parse()?; // why?\nlet m: i32 = '?' as i32;";
        let lines = ["ParseIntError {".to_string(), "    kind: InvalidDigit,".into(), "}".into(), STOP_MARKER.into()];
        let (seen, r) = route_all(7, code, &lines);
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(seen[0], Output::Stderr("ParseIntError {\n".into()));
        let [Output::Error { ename, evalue, .. }] = r.stops.as_slice() else { panic!("{:?}", r.stops) };
        assert_eq!((ename.as_str(), evalue.as_str()), ("Error", "the `?` at cell 7, line 1 returned an error (printed above)"));
        // Non-ASCII text around: lines still count (and nothing panics).
        let (_, r) = route_all(9, "let crème_brûlée = \"é?\";\nlet é = f()?;", &[STOP_MARKER.to_string()]);
        let [Output::Error { evalue, .. }] = r.stops.as_slice() else { panic!() };
        assert_eq!(evalue, "the `?` at cell 9, line 2 returned an error (printed above)");
        // `?`s on two lines: only the cell is named.
        let (_, r) = route_all(8, "a()?;\nb()?;", &[STOP_MARKER.to_string()]);
        let [Output::Error { evalue, .. }] = r.stops.as_slice() else { panic!() };
        assert_eq!(evalue, "the `?` at cell 8 returned an error (printed above)");
    }

    #[test]
    fn an_error_line_without_the_stop_marker_is_text() {
        let (seen, r) = route_all(1, "", &[format!("{ERROR_LINE_PREFIX}{ENGINE_JSON}"), "next".into()]);
        assert!(r.stops.is_empty());
        assert_eq!(
            seen,
            vec![
                Output::Stderr("ValueError: axis 4 is out of bounds\nfor an array of rank 1\n  (traced at cell 3, line 2)\n".into()),
                Output::Stderr("next\n".into()),
            ]
        );
        // Inside other text (`dbg!` of a `Result`): the error's text on one line.
        let line = format!("[cell:1:1] r = Err({ERROR_LINE_PREFIX}{ENGINE_JSON}) and more");
        assert_eq!(
            readable(&line),
            "[cell:1:1] r = Err(ValueError: axis 4 is out of bounds\nfor an array of rank 1 (traced at cell 3, line 2)) and more"
        );
        assert_eq!(readable("plain"), "plain");
        let broken = format!("x {ERROR_LINE_PREFIX}{{not json");
        assert_eq!(readable(&broken), broken);
    }

    #[test]
    fn the_stack_overflow_line_is_not_shown() {
        let (seen, r) = route_all(1, "", &["warning: x".into(), super::super::exec::STACK_OVERFLOW_MARKER.to_string()]);
        assert!(r.overflowed);
        assert_eq!(seen, vec![Output::Stderr("warning: x\n".into())]);
    }
}
