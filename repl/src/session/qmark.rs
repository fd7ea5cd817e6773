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
//! error naming the cell, named by the error's type when its `{:#?}` text shows it
//! (`ParseIntError`), else `Error`. An error line without the marker (a user's `eprintln!("{e:#?}")`)
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
    /// The names whose earlier values the engine kept at the cell's start.
    pub kept: Vec<String>,
    /// Errors of `?`s that stopped the cell, in order.
    pub stops: Vec<Output>,
    /// An engine error line not yet followed by the stop marker (its JSON).
    pending: Option<String>,
    /// Where a `?` in the cell is: `cell N, line L` when one line has `?`s, else `cell N`.
    place: String,
    /// The cell's number and code (as evaluated, magic rewritten), for `dbg!` locations.
    cell: u64,
    code: String,
    /// evcxr's generated `src/lib.rs` of this cell: its path, and its text once read (on
    /// the first `dbg!` line).
    generated_path: Option<std::path::PathBuf>,
    generated: Option<Option<String>>,
    /// The stderr text lines since the last stop (capped): the text of a non-engine error
    /// a `?` returned ends there, and its first line names its type.
    recent: Vec<String>,
}

/// How many recent stderr lines [`StderrRouter`] keeps to find a `?` error's type name.
const RECENT_LINES: usize = 400;

impl StderrRouter {
    /// A router for cell number `cell` whose text (as the user's lines) is `code`.
    pub fn new(cell: u64, code: &str) -> Self {
        let lines = super::complete::question_mark_lines(code);
        let place = match lines.as_slice() {
            [line] => format!("cell {cell}, line {line}"),
            _ => format!("cell {cell}"),
        };
        StderrRouter {
            overflowed: false,
            kept: Vec::new(),
            stops: Vec::new(),
            pending: None,
            place,
            cell,
            code: code.to_string(),
            generated_path: None,
            generated: None,
            recent: Vec::new(),
        }
    }

    /// Maps `dbg!`'s `[src/lib.rs:N:M]` to the cell's line, reading evcxr's generated
    /// source of this cell from `lib_rs` when a `dbg!` line first appears.
    pub fn with_generated(mut self, lib_rs: std::path::PathBuf) -> Self {
        self.generated_path = Some(lib_rs);
        self
    }

    /// `line` with a leading `[src/lib.rs:N:M]` (`dbg!`'s location in evcxr's generated
    /// crate) replaced by `[cell C, line L]` when generated line N is a `dbg!` line found
    /// once in this cell; otherwise unchanged (a `dbg!` in a function defined by an earlier
    /// cell keeps evcxr's location).
    fn map_dbg(&mut self, line: String) -> String {
        let Some(rest) = line.strip_prefix('[') else { return line };
        let Some(close) = rest.find("] ") else { return line };
        let location = &rest[..close];
        if !location.starts_with("src/lib.rs:") {
            return line;
        }
        if self.generated.is_none() {
            self.generated = Some(self.generated_path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()));
        }
        let Some(Some(generated)) = &self.generated else { return line };
        let is_dbg = location
            .split(':')
            .nth(1)
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| generated.lines().nth(n.checked_sub(1)?))
            .is_some_and(|text| text.contains("dbg!"));
        if !is_dbg {
            return line;
        }
        match render::map_location(location, &self.code, Some(generated)) {
            Some(mapped) => {
                let cell_line = mapped.trim_start_matches("cell:").split(':').next().unwrap_or("");
                format!("[cell {}, line {cell_line}]{}", self.cell, &rest[close + 1..])
            }
            None => line,
        }
    }

    /// Handles one line of the child's stderr.
    pub fn route(&mut self, line: String, sink: &mut dyn FnMut(Output)) {
        let bare = line.trim_end();
        if bare == super::exec::STACK_OVERFLOW_MARKER {
            self.overflowed = true;
        } else if let Some(name) = bare.strip_prefix(super::exec::KEPT_MARKER) {
            self.kept.push(name.to_string());
        } else if bare == STOP_MARKER {
            let stop = match self.pending.take() {
                Some(json) => self.engine_stop(&json),
                None => {
                    let ename = debug_type_name(&self.recent).unwrap_or_else(|| "Error".into());
                    // One sentence for both (Jupyter shows the evalue in summaries, the
                    // traceback in the cell).
                    let evalue = format!("the `?` at {} returned the error printed above; the cell stopped there", self.place);
                    Output::Error { traceback: vec![format!("{ename}: {evalue}")], evalue, ename }
                }
            };
            self.stops.push(stop);
            self.recent.clear();
        } else if let Some(json) = line.strip_prefix(ERROR_LINE_PREFIX).filter(|j| is_error_json(j)) {
            self.flush(sink);
            self.pending = Some(json.to_string());
        } else {
            self.flush(sink);
            let line = self.map_dbg(line);
            if self.recent.len() == RECENT_LINES {
                self.recent.remove(0);
            }
            self.recent.push(line.clone());
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

/// The Rust type name of the error a `?` returned, from the text evcxr printed with the
/// session's error format (`{:#?}`, the last lines of `recent`): a derived `Debug` starts
/// with the type's name (`ParseIntError {`, `TryFromIntError(())`), kept when it ends in
/// `Error`; `std::io::Error`'s `Debug` forms (`Os { code, kind, message }`, `Custom { kind,
/// error }`) give `io::Error`. `None` when the text does not tell (a `String`, an enum
/// variant, a hand-written `Debug`): evcxr gives the session only the text, never the type.
fn debug_type_name(recent: &[String]) -> Option<String> {
    let last = recent.iter().rposition(|l| !l.trim().is_empty())?;
    // `{:#?}` of a struct or tuple struct ends with an unindented `}` or `)`: its first line
    // is the nearest unindented line above that is not a closer.
    let closer = |l: &str| matches!(l.trim_end(), "}" | ")" | "]");
    let start = if closer(&recent[last]) {
        (0..last).rev().find(|&i| !recent[i].starts_with([' ', '\t']) && !closer(&recent[i]))?
    } else {
        last
    };
    let first = recent[start].trim_end();
    let name_end = first.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).unwrap_or(first.len());
    let (name, after) = first.split_at(name_end);
    if !(after.is_empty() || after.starts_with(" {") || after.starts_with('(')) {
        return None;
    }
    let body = recent[start..=last].join("\n");
    if (name == "Os" && body.contains("kind:") && body.contains("code:"))
        || (name == "Custom" && body.contains("kind:") && body.contains("error:"))
    {
        return Some("io::Error".into());
    }
    let short = name.rsplit("::").next().unwrap_or(name);
    (short.ends_with("Error") && short.starts_with(|c: char| c.is_ascii_uppercase())).then(|| short.to_string())
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
        assert_eq!((ename.as_str(), evalue.as_str()), ("ParseIntError", "the `?` at cell 7, line 1 returned the error printed above; the cell stopped there"));
        // Non-ASCII text around: lines still count (and nothing panics).
        let (_, r) = route_all(9, "let crème_brûlée = \"é?\";\nlet é = f()?;", &[STOP_MARKER.to_string()]);
        let [Output::Error { evalue, .. }] = r.stops.as_slice() else { panic!() };
        assert_eq!(evalue, "the `?` at cell 9, line 2 returned the error printed above; the cell stopped there");
        // `?`s on two lines: only the cell is named.
        let (_, r) = route_all(8, "a()?;\nb()?;", &[STOP_MARKER.to_string()]);
        let [Output::Error { evalue, .. }] = r.stops.as_slice() else { panic!() };
        assert_eq!(evalue, "the `?` at cell 8 returned the error printed above; the cell stopped there");
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

    #[test]
    fn a_question_mark_errors_type_name_comes_from_its_debug_text() {
        let name = |lines: &[&str]| debug_type_name(&lines.iter().map(|l| l.to_string()).collect::<Vec<_>>());
        assert_eq!(name(&["ParseIntError {", "    kind: InvalidDigit,", "}"]).as_deref(), Some("ParseIntError"));
        assert_eq!(name(&["earlier output", "TryFromIntError(", "    (),", ")"]).as_deref(), Some("TryFromIntError"));
        assert_eq!(name(&["ParseBoolError"]).as_deref(), Some("ParseBoolError"));
        assert_eq!(name(&["Os {", "    code: 2,", "    kind: NotFound,", "    message: \"No such file or directory\",", "}"]).as_deref(), Some("io::Error"));
        // Texts that do not name their type: a String, an enum variant, a hand-written Debug.
        assert_eq!(name(&["\"bad input\""]), None);
        assert_eq!(name(&["NotFound"]), None);
        assert_eq!(name(&["Error: something failed"]), None);
        assert_eq!(name(&[]), None);
        // Through the router: the name of the text printed just before the marker.
        let lines = ["Utf8Error {".to_string(), "    valid_up_to: 0,".into(), "}".into(), STOP_MARKER.into()];
        let (_, r) = route_all(3, "let s = std::str::from_utf8(&b)?;", &lines);
        let [Output::Error { ename, .. }] = r.stops.as_slice() else { panic!() };
        assert_eq!(ename, "Utf8Error");
    }

    #[test]
    fn dbg_locations_name_the_cells_line() {
        let dir = std::env::temp_dir().join(format!("jaxrepl-qmark-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib_rs = dir.join("lib.rs");
        std::fs::write(&lib_rs, "fn run() {\n    let a = 1;\n        let q = dbg!(a + 4);\n    other(a);\n}\n").unwrap();
        let code = "let a = 1;\nlet q = dbg!(a + 4);";
        let mut seen = Vec::new();
        let mut r = StderrRouter::new(12, code).with_generated(lib_rs.clone());
        for l in ["[src/lib.rs:3:17] a + 4 = 5", "[src/lib.rs:4:5] other = 1", "[src/main.rs:1:1] x = 2", "plain [src/lib.rs:3:17]"] {
            r.route(l.to_string(), &mut |o| seen.push(o));
        }
        assert_eq!(
            seen,
            vec![
                Output::Stderr("[cell 12, line 2] a + 4 = 5\n".into()),
                // Generated line 4 is not a `dbg!` line (a function of an earlier cell): kept.
                Output::Stderr("[src/lib.rs:4:5] other = 1\n".into()),
                Output::Stderr("[src/main.rs:1:1] x = 2\n".into()),
                Output::Stderr("plain [src/lib.rs:3:17]\n".into()),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
