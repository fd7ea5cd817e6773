//! Turning evcxr's results into [`Output`]s: rich outputs by MIME type, the engine's error
//! frames, panics reported by our hook in the child, and compile errors rendered with the
//! cell's own line numbers (`error[E0308]: ... --> cell:3:5`).

use super::Output;
use serde_json::Value;
use std::collections::HashMap;

/// MIME type of an engine error frame (`Err(e)` of a displayed `Result`).
pub const ERROR_MIME: &str = "application/vnd.jaxrepl.error+json";
/// MIME type our panic hook in the child uses (see `child::PANIC_HOOK`).
pub const PANIC_MIME: &str = "application/vnd.jaxrepl.panic+json";

/// Order in which MIME types of one display are listed (others follow, sorted).
const MIME_ORDER: &[&str] = &[
    "text/plain",
    "text/html",
    "image/svg+xml",
    "image/png",
    "text/markdown",
    "application/json",
];

/// Splits evcxr's outputs into one `Display` (if any MIME data remains) and errors.
///
/// `cell` is the user's code, used to map panic locations in the generated source back to
/// cell lines; `generated` is the generated `lib.rs` of the last compile, if available.
pub fn split_outputs(
    mut by_mime: HashMap<String, String>,
    cell: &str,
    generated: Option<&str>,
) -> (Option<Output>, Vec<Output>) {
    let mut errors = Vec::new();
    if let Some(panic) = by_mime.remove(PANIC_MIME) {
        errors.push(panic_output(&panic, cell, generated));
    }
    if let Some(err) = by_mime.remove(ERROR_MIME) {
        let mut out = engine_error_output(&err);
        if let Output::Error { traceback, .. } = &mut out {
            for line in traceback.iter_mut() {
                *line = map_locations_in(line, cell, generated);
            }
        }
        errors.push(out);
    }
    if by_mime.len() == 1
        && let Some(e) = by_mime.get("text/plain").and_then(|t| debug_fallback_error(t))
    {
        errors.push(e);
        return (None, errors);
    }
    if by_mime.len() == 1
        && let Some(t) = by_mime.get_mut("text/plain")
        && let Some(inner) = debug_fallback_ok(t)
    {
        *t = inner;
    }
    if by_mime.is_empty() {
        return (None, errors);
    }
    let mut items: Vec<(String, String)> = by_mime.into_iter().collect();
    items.sort_by_key(|(mime, _)| {
        let rank = MIME_ORDER.iter().position(|m| m == mime).unwrap_or(MIME_ORDER.len());
        (rank, mime.clone())
    });
    (Some(Output::Display(items)), errors)
}

/// The engine error in `text`, when `text` is the Rust Debug form of `Err(jax::Error)`
/// (`Err(Error { kind: Value, message: "…", location: None })`): evcxr shows a cell's value
/// that way when its first build failed, which a cell whose final expression moves a
/// variable causes. Such an `Err` is the cell's error, as any other `Err(e)` value; `None`
/// for any other text.
pub fn debug_fallback_error(text: &str) -> Option<Output> {
    let rest = text.trim_end().strip_prefix("Err(Error { kind: ")?.strip_suffix(" })")?;
    let (kind, rest) = rest.split_once(", message: ")?;
    let ename = match kind {
        "Type" => "TypeError",
        "Value" => "ValueError",
        "TracerBoolConversion" => "TracerBoolConversionError",
        "Concretization" => "ConcretizationTypeError",
        "Compile" => "CompileError",
        "Runtime" => "RuntimeError",
        "Interrupted" => "KeyboardInterrupt",
        "FloatingPoint" => "FloatingPointError",
        "UnexpectedTracer" => "UnexpectedTracerError",
        "NotImplemented" => "NotImplementedError",
        "ShardingType" => "ShardingTypeError",
        _ => return None,
    };
    let (message, rest) = debug_string(rest)?;
    let location = rest.strip_prefix(", location: ")?;
    let at = match location {
        "None" => None,
        l => {
            let l = l.strip_prefix("Some(SourceInfo { file: ")?.strip_suffix(" })")?;
            let (file, rest) = debug_string(l)?;
            let (line, column) = rest.strip_prefix(", line: ")?.split_once(", column: ")?;
            let (line, column) = (line.parse::<u32>().ok()?, column.parse::<u32>().ok()?);
            // As the engine writes a location (`SourceInfo`'s Display).
            Some(if file.starts_with("cell ") { format!("{file}, line {line}") } else { format!("{file}:{line}:{column}") })
        }
    };
    let mut traceback = vec![format!("{ename}: {message}")];
    if let Some(at) = at {
        traceback.push(format!("  (traced at {at})"));
    }
    Some(Output::Error { ename: ename.to_string(), evalue: message, traceback })
}

/// The engine value in `text`, when `text` is the Rust Debug form of `Ok(v)` for an engine
/// value whose Debug form is its display text (`Ok(Array([0., 2.], dtype=float32))`,
/// `Ok({ lambda ; a:f32[8]. let … })`): evcxr shows a cell's `Result` value that way when
/// its first build failed (a final expression that moves a variable, as `f.call(x)` or
/// `make_jaxpr(move |a| sm.call(a), &x)`), where the value would otherwise show as itself.
/// `None` for any other text.
pub fn debug_fallback_ok(text: &str) -> Option<String> {
    let inner = text.trim_end().strip_prefix("Ok(")?.strip_suffix(')')?;
    ["Array(", "{ lambda "].iter().any(|p| inner.starts_with(p)).then(|| inner.to_string())
}

/// A Rust Debug string literal at the start of `s` (`"a\"b\n"`), unescaped, and the rest.
fn debug_string(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 2..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                'u' => {
                    let mut hex = String::new();
                    chars.next().filter(|(_, c)| *c == '{')?;
                    for (_, h) in chars.by_ref() {
                        if h == '}' {
                            break;
                        }
                        hex.push(h);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other), // \\ \" \'
            },
            c => out.push(c),
        }
    }
    None
}

/// Parses an engine error frame; malformed JSON is shown as the raw text.
pub fn engine_error_output(json: &str) -> Output {
    match serde_json::from_str::<Value>(json) {
        Ok(v) => {
            let ename = v["ename"].as_str().unwrap_or("Error").to_string();
            let evalue = v["evalue"].as_str().unwrap_or("").to_string();
            let traceback = match &v["traceback"] {
                Value::Array(lines) => lines
                    .iter()
                    .map(|l| l.as_str().map(str::to_string).unwrap_or_else(|| l.to_string()))
                    .collect(),
                _ => Vec::new(),
            };
            let traceback = if traceback.is_empty() {
                vec![format!("{ename}: {evalue}")]
            } else {
                traceback
            };
            Output::Error { ename, evalue, traceback }
        }
        Err(_) => Output::Error {
            ename: "Error".into(),
            evalue: json.to_string(),
            traceback: vec![json.to_string()],
        },
    }
}

/// Builds the `Panic` error from our hook's JSON (`{"message","location","thread"}`).
pub fn panic_output(json: &str, cell: &str, generated: Option<&str>) -> Output {
    let v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let message = v["message"].as_str().unwrap_or(json).to_string();
    let location = v["location"].as_str().unwrap_or("").to_string();
    let thread = v["thread"].as_str().unwrap_or("");
    let shown = map_location(&location, cell, generated).unwrap_or(location);
    // The engine's eager operators panic with `SomeError: message` (DESIGN.md; an operator
    // cannot return a Result): keep that class name, as JAX would raise it, and show the
    // error as an error at the user's line rather than as a Rust panic.
    let engine_class = match message.split_once(": ") {
        Some((class, rest))
            if class.ends_with("Error")
                && class.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && class.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            Some((class.to_string(), rest.to_string()))
        }
        _ => None,
    };
    let mut traceback = Vec::new();
    if engine_class.is_none() {
        traceback.push(if thread.is_empty() || thread == "main" {
            format!("panicked at {shown}:")
        } else {
            format!("thread '{thread}' panicked at {shown}:")
        });
    }
    traceback.extend(message.lines().map(str::to_string));
    if engine_class.is_some() && !shown.is_empty() {
        traceback.push(format!("  (at {shown})"));
    }
    let (ename, evalue) = engine_class.unwrap_or_else(|| ("Panic".to_string(), message));
    Output::Error { ename, evalue, traceback }
}

/// Maps `src/lib.rs:LINE:COL` in evcxr's generated crate to `cell:LINE:COL` by finding the
/// generated line's text among the cell's lines. Locations elsewhere (the engine, std)
/// are kept as they are.
pub(super) fn map_location(location: &str, cell: &str, generated: Option<&str>) -> Option<String> {
    let mut parts = location.rsplitn(3, ':');
    let col: usize = parts.next()?.parse().ok()?;
    let line: usize = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    if !file.ends_with("lib.rs") {
        return None;
    }
    let text = generated?.lines().nth(line.checked_sub(1)?)?;
    let want = text.trim();
    if want.is_empty() {
        return None;
    }
    // The location may belong to an earlier cell's generated crate (a function defined
    // there, traced now): map only a distinctive line that occurs exactly once.
    if want.chars().filter(|c| c.is_alphanumeric()).count() < 3 {
        return None;
    }
    let mut hits = cell.lines().enumerate().filter(|(_, l)| l.trim() == want);
    let cell_line = hits.next()?.0 + 1;
    if hits.next().is_some() {
        return None;
    }
    let cell_text = cell.lines().nth(cell_line - 1)?;
    // Columns shift by the difference in leading whitespace.
    let lead_gen = text.len() - text.trim_start().len();
    let lead_cell = cell_text.len() - cell_text.trim_start().len();
    let col = (col + lead_cell).saturating_sub(lead_gen).max(1);
    Some(format!("cell:{cell_line}:{col}"))
}

/// Rewrites every `src/lib.rs:LINE:COL` in `text` (the generated crate of a cell) that can
/// be mapped to `cell:LINE:COL`.
fn map_locations_in(text: &str, cell: &str, generated: Option<&str>) -> String {
    const FILE: &str = "src/lib.rs:";
    let mut out = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find(FILE) {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + FILE.len()..];
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let l_len = digits(after);
        let col_part = after.get(l_len + 1..).filter(|_| l_len > 0 && after[l_len..].starts_with(':'));
        let c_len = col_part.map(digits).unwrap_or(0);
        if c_len > 0 {
            let whole = &rest[pos..pos + FILE.len() + l_len + 1 + c_len];
            match map_location(whole, cell, generated) {
                Some(mapped) => out.push_str(&mapped),
                None => out.push_str(whole),
            }
            rest = &rest[pos + whole.len()..];
        } else {
            out.push_str(FILE);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// rustc's `expected value, found macro `s`` for a name the user never defined but the
/// prelude has a macro of (`s!` indexing, `P!` partition specs): the user's real mistake
/// is the undefined value, so the error says that, with a note on the macro. Returns the
/// name and the note.
fn undefined_value_named_like_macro(message: &str) -> Option<(String, String)> {
    let name = message.strip_prefix("expected value, found macro `")?.strip_suffix('`')?;
    let what = match name {
        "s" => "`s![...]` builds an array index: `x.index(s![1.., 0])`",
        "P" => "`P![...]` builds a PartitionSpec",
        _ => "a macro",
    };
    Some((
        name.to_string(),
        format!("no value `{name}` is defined in this cell or an earlier one; the only `{name}` in scope is the prelude's macro ({what}). Define it first (`let {name} = ...;`)."),
    ))
}

/// Renders rustc errors in rustc's own shape, with cell line numbers:
/// ```text
/// error[E0308]: mismatched types
///  --> cell:3:13
///   |
/// 3 | let y: i32 = "a";
///   |              ^^^ expected `i32`, found `&str`
/// ```
///
/// `inserted` is the line (1-based) of the one line the session put into the cell (the
/// `?` stop hook and the engine's line-registration call; after any leading evcxr `:`
/// commands): spans below it move up one line, and spans on it are dropped. `cell` is the cell as the user wrote it; with `magic`, its magic line was
/// rewritten (`%jaxpr CALL` → `jax::magic::jaxpr(|| CALL)`), and spans on that line move
/// back to the user's columns (those in the generated call point at the `%`).
pub fn compile_errors(
    errors: &[evcxr::CompilationError],
    cell: &str,
    inserted: Option<usize>,
    magic: Option<super::magic::MagicColumns>,
) -> Output {
    let mut traceback = Vec::new();
    let mut first = None;
    for error in errors {
        let macro_note = undefined_value_named_like_macro(&error.message());
        let message = match &macro_note {
            Some((name, _)) => format!("cannot find value `{name}` in this scope"),
            None => error.message(),
        };
        let head = match error.code() {
            Some(code) => format!("{}[{code}]: {message}", error.level()),
            None => format!("{}: {message}", error.level()),
        };
        if first.is_none() {
            first = Some(message.clone());
        }
        if !traceback.is_empty() {
            traceback.push(String::new());
        }
        traceback.push(head);
        let spans: Vec<_> = error
            .spanned_messages()
            .iter()
            .filter(|s| s.span.is_none_or(|sp| Some(sp.start_line) != inserted))
            .cloned()
            .filter_map(|mut s| {
                if let Some(sp) = &mut s.span {
                    let up = |l: usize| if inserted.is_some_and(|at| l > at) { l - 1 } else { l };
                    sp.start_line = up(sp.start_line);
                    sp.end_line = up(sp.end_line).max(sp.start_line);
                    if let Some(m) = magic {
                        // A note about the generated call (rustc's "while parsing the
                        // body of this closure") means nothing to the user: dropped.
                        if sp.start_line == m.line && !s.is_primary && sp.start_column <= m.code_start {
                            return None;
                        }
                        if sp.start_line == m.line {
                            sp.start_column = m.user_column(sp.start_column);
                        }
                        if sp.end_line == m.line {
                            sp.end_column = m.user_column(sp.end_column);
                        }
                    }
                }
                Some(s)
            })
            .collect();
        let mut located: Vec<_> = spans.iter().filter(|s| s.span.is_some()).collect();
        let width = located
            .iter()
            .filter_map(|s| s.span.map(|sp| sp.start_line.to_string().len()))
            .max()
            .unwrap_or(1);
        let pad = " ".repeat(width);
        // The arrow points at the primary span; source lines are shown in order, each once.
        if let Some(primary) = located.iter().find(|s| s.is_primary).or(located.first())
            && let Some(sp) = primary.span
        {
            traceback.push(format!("{pad}--> cell:{}:{}", sp.start_line, sp.start_column));
            traceback.push(format!("{pad} |"));
        }
        located.sort_by_key(|s| s.span.map(|sp| (sp.start_line, sp.start_column)));
        let mut shown_line = 0;
        for spanned in &located {
            let Some(span) = spanned.span else { continue };
            let Some(text) = cell.lines().nth(span.start_line.saturating_sub(1)) else {
                continue;
            };
            if span.start_line != shown_line {
                traceback.push(format!("{:>width$} | {}", span.start_line, text));
                shown_line = span.start_line;
            }
            let start = span.start_column.max(1) - 1;
            let end = if span.end_line == span.start_line {
                span.end_column.max(span.start_column + 1) - 1
            } else {
                text.chars().count().max(start + 1)
            };
            let marker = if spanned.is_primary { '^' } else { '-' };
            let underline: String = std::iter::repeat_n(marker, end.saturating_sub(start).max(1)).collect();
            let label = if spanned.label.is_empty() { String::new() } else { format!(" {}", spanned.label) };
            traceback.push(format!("{pad} | {}{underline}{label}", " ".repeat(start)));
        }
        for spanned in spans.iter().filter(|s| s.span.is_none() && !s.label.is_empty()) {
            traceback.push(format!("{pad} = note: {}", spanned.label));
        }
        for help in error.help() {
            // The first line is the advice; rustc's suggested replacement text follows it.
            // Advice about the magic's generated closure does not apply to the user's line.
            if magic.is_some() && help.contains("closure") {
                continue;
            }
            let mut lines = help.lines();
            if let Some(line) = lines.next() {
                traceback.push(format!("{pad} = help: {line}"));
                // A list follows the advice (rustc's "the following other types implement
                // trait ..:"): shown too, as rustc shows it.
                if line.trim_end().ends_with(':') {
                    traceback.extend(lines.take(HELP_LIST_LINES).map(|l| format!("{pad}         {l}")));
                }
            }
        }
        if let Some(note) = scalar_operand_note(&message).or_else(|| call_syntax_note(&message)).or_else(|| magic_after_expression_note(&message, cell)) {
            traceback.push(format!("{pad} = note: {note}"));
        }
        if let Some((_, note)) = &macro_note {
            traceback.push(format!("{pad} = note: {note}"));
        }
        if let Some(hint) = error.evcxr_extra_hint() {
            traceback.push(format!("{pad} = note: {hint}"));
        }
    }
    if traceback.is_empty() {
        traceback.push("error: the cell did not compile".into());
    }
    Output::Error {
        ename: "CompileError".into(),
        evalue: first.unwrap_or_else(|| "the cell did not compile".into()),
        traceback,
    }
}

/// The most lines of a list in rustc's help shown under it (rustc itself ends a long list
/// with "and N others").
const HELP_LIST_LINES: usize = 10;

/// The note for an operator between an `Array` and a Rust scalar type the engine's
/// operators do not take (`x + 1.0f32`, `x * n` with `n: usize`): arrays take `f64` and
/// `i32` scalars, JAX's weak-typed Python scalars, so that a literal (`x * 2.0`) infers.
fn scalar_operand_note(message: &str) -> Option<String> {
    const OPS: &[&str] = &["cannot add", "cannot subtract", "cannot multiply", "cannot divide"];
    const OTHER: &[&str] = &["`f32`", "`f16`", "`i8`", "`i16`", "`i64`", "`i128`", "`isize`", "`u8`", "`u16`", "`u32`", "`u64`", "`u128`", "`usize`"];
    let scalar = OTHER.iter().find(|t| message.contains(*t))?;
    (OPS.iter().any(|op| message.starts_with(op)) && message.contains("Array`")).then(|| {
        format!(
            "an Array's operators take Rust `f64` and `i32` scalars (JAX's weak-typed Python scalars, which keep \
             the array's dtype), not {scalar}: convert it (`x + c as f64`), or use a strongly typed scalar array \
             (`jnp::full(&[], c, DType::F32)`)"
        )
    })
}

/// The note for calling a transformed function with Python's syntax (`f(x)` where `f` is a
/// `Jitted`, `Compiled`, `ShardMapped` or `Linearized` from `jit`, `.compile()`, `shard_map`, `linearize`): Rust cannot make a struct
/// callable, so the engine's transformed functions are called with `.call(args)` (rustc's
/// E0618, "expected function, found `jax::prelude::Jitted<..>`").
fn call_syntax_note(message: &str) -> Option<String> {
    let found = message.strip_prefix("expected function, found `")?;
    let name = found.split(['<', '`']).next()?.rsplit("::").next()?;
    const CALLABLE: &[&str] = &["Jitted", "Compiled", "ShardMapped", "Linearized"];
    CALLABLE.contains(&name).then(|| {
        format!(
            "a `{name}` is called with `.call(..)`, not `f(..)` (Rust cannot make a value callable): `f.call(&x)` \
             for one argument, `f.call((&x, &y))` for several"
        )
    })
}

/// The note for a magic line under a line that does not end its statement (`x` then
/// `%lower f.call(&x)`): Rust reads `x % lower(f.call(&x))`, the remainder operator, and
/// fails with "cannot find function `lower` in this scope".
fn magic_after_expression_note(message: &str, cell: &str) -> Option<String> {
    let name = message.strip_prefix("cannot find function `")?.strip_suffix("` in this scope")?;
    let magic = super::magic::MAGICS.iter().find(|m| m.name == name)?;
    let lines: Vec<&str> = cell.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().strip_prefix('%').is_some_and(|r| r.split_whitespace().next() == Some(magic.name)))?;
    let above = lines[..at].iter().rev().find(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))?;
    Some(format!(
        "line {} is the magic `%{name}`, but the line above does not end its statement, so Rust reads `%` as the \
         remainder operator: end the line above with `;` (a magic goes on its own line, after complete statements)",
        at + 1,
    )).filter(|_| !above.trim_end().ends_with(';'))
}

/// The note for evcxr's "The variable `vf` has type `impl Fn(..)` which cannot be
/// persisted" (or "is a closure"): a `let` of a transformation's result (`vmap`, `grad`,
/// `value_and_grad`, …: an unnamed closure type) cannot be kept between cells. evcxr's own
/// hint (`Box<dyn YourType>`) does not help there.
pub fn unpersistable_note(message: &str) -> Option<String> {
    let var = message.strip_prefix("The variable `")?.split('`').next()?;
    (message.contains("which cannot be persisted") && (message.contains("impl Fn") || message.contains("is a closure"))).then(|| {
        format!(
            "`{var}` is a function value whose type Rust does not name (what `vmap`, `grad` or a closure returns), so it cannot be kept for later cells: wrap it in `jit(..)` (a `Jitted` is kept; call it with `.call(..)`), use it within this cell (inside `{{ .. }}`), or write it as a `fn` item"
        )
    })
}

/// A plain error output with a one-line traceback.
pub fn simple_error(ename: &str, evalue: impl Into<String>) -> Output {
    let evalue = evalue.into();
    let mut traceback = vec![format!("{ename}: {}", evalue.lines().next().unwrap_or(""))];
    traceback.extend(evalue.lines().skip(1).map(str::to_string));
    Output::Error {
        ename: ename.into(),
        evalue,
        traceback,
    }
}

#[cfg(test)]
mod debug_fallback_tests {
    use super::*;

    #[test]
    fn an_err_shown_by_evcxrs_debug_fallback_is_the_cells_error() {
        // The engine's `{:?}` of `Err(jax::Error)` (engine/src/error.rs tests the same text).
        let e = debug_fallback_error(
            "Err(Error { kind: Value, message: \"Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.\", location: None })",
        );
        assert_eq!(
            e,
            Some(Output::Error {
                ename: "ValueError".into(),
                evalue: "Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.".into(),
                traceback: vec!["ValueError: Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.".into()],
            })
        );
        let e = debug_fallback_error(
            "Err(Error { kind: Runtime, message: \"pure_callback `picky` failed: \\\"q\\\" \\u{e9}\\nnext\", location: Some(SourceInfo { file: \"cell 19\", line: 7, column: 13 }) })",
        );
        let Some(Output::Error { ename, evalue, traceback }) = e else { panic!("{e:?}") };
        assert_eq!(ename, "RuntimeError");
        assert_eq!(evalue, "pure_callback `picky` failed: \"q\" \u{e9}\nnext");
        assert_eq!(traceback[1], "  (traced at cell 19, line 7)");
        // Anything else is a value.
        assert_eq!(debug_fallback_error("Ok(Array([12., 16.], dtype=float32))"), None);
        assert_eq!(debug_fallback_error("Err(ParseIntError { kind: InvalidDigit })"), None);
        assert_eq!(debug_fallback_error("Err(Error { kind: Value, message: \"unterminated"), None);
        // split_outputs makes it an error, not a display.
        let by_mime = HashMap::from([("text/plain".to_string(), "Err(Error { kind: Type, message: \"bad\", location: None })".to_string())]);
        let (display, errors) = split_outputs(by_mime, "", None);
        assert!(display.is_none());
        assert!(matches!(&errors[..], [Output::Error { ename, .. }] if ename == "TypeError"));
    }

    #[test]
    fn an_ok_engine_value_shown_by_evcxrs_debug_fallback_is_the_value() {
        assert_eq!(debug_fallback_ok("Ok(Array([0., 2., 4.], dtype=float32))").as_deref(), Some("Array([0., 2., 4.], dtype=float32)"));
        let j = "{ lambda ; a:f32[8]. let b:f32[8] = mul a 2.0:f32[] in (b,) }";
        assert_eq!(debug_fallback_ok(&format!("Ok({j})\n")).as_deref(), Some(j));
        // Other values keep their Debug text.
        assert_eq!(debug_fallback_ok("Ok(3)"), None);
        assert_eq!(debug_fallback_ok("Ok(Foo { a: 1 })"), None);
        assert_eq!(debug_fallback_ok("Array([1.], dtype=float32)"), None);
        let by_mime = HashMap::from([("text/plain".to_string(), "Ok(Array([1.], dtype=float32))".to_string())]);
        let (display, errors) = split_outputs(by_mime, "", None);
        assert!(errors.is_empty());
        assert_eq!(display, Some(Output::Display(vec![("text/plain".into(), "Array([1.], dtype=float32)".into())])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsupported_scalar_operand_gets_a_note() {
        let note = scalar_operand_note("cannot add `f32` to `jax::Array`").unwrap();
        assert!(note.starts_with("an Array's operators take Rust `f64` and `i32` scalars"), "{note}");
        assert!(note.contains("not `f32`: convert it (`x + c as f64`)"), "{note}");
        assert!(scalar_operand_note("cannot multiply `Array` by `usize`").unwrap().contains("not `usize`"));
        assert_eq!(scalar_operand_note("cannot add `f64` to `Array`"), None);
        assert_eq!(scalar_operand_note("cannot add `f32` to `String`"), None);
    }

    #[test]
    fn an_unpersistable_transformed_function_gets_a_note() {
        // evcxr 0.22's text for `let vf = vmap(|x: Array| ..);` at the top of a cell.
        let msg = "The variable `vf` has type `impl Fn(Array) -> Result<Array, jax::Error> + '_` which cannot be persisted.\nYou might be able to fix this by creating a `Box<dyn YourType>`. e.g.\nlet v: Box<dyn core::fmt::Debug> = Box::new(foo());";
        let note = unpersistable_note(msg).unwrap();
        assert!(note.starts_with("`vf` is a function value") && note.contains("wrap it in `jit(..)`"), "{note}");
        assert_eq!(unpersistable_note("The variable `s` has type `MyStruct<'a>` which cannot be persisted."), None);
    }

    #[test]
    fn calling_a_jitted_function_like_python_gets_a_note() {
        let note = call_syntax_note("expected function, found `jax::prelude::Jitted<jax::prelude::Array, jax::prelude::Array>`").unwrap();
        assert_eq!(
            note,
            "a `Jitted` is called with `.call(..)`, not `f(..)` (Rust cannot make a value callable): `f.call(&x)` for one argument, `f.call((&x, &y))` for several"
        );
        assert!(call_syntax_note("expected function, found `Compiled`").unwrap().starts_with("a `Compiled` is called"));
        assert_eq!(call_syntax_note("expected function, found `i32`"), None);
        let cell = "let y = x * 2.0\n%lower f.call(&y)";
        let note = magic_after_expression_note("cannot find function `lower` in this scope", cell).unwrap();
        assert!(note.starts_with("line 2 is the magic `%lower`, but the line above does not end its statement"), "{note}");
        assert_eq!(magic_after_expression_note("cannot find function `lower` in this scope", "let y = 1;\n%lower f.call(&y)"), None);
        assert_eq!(magic_after_expression_note("cannot find function `foo` in this scope", cell), None);
        assert_eq!(call_syntax_note("expected function, found `jax::prelude::Array`"), None);
    }

    #[test]
    fn engine_error_frame_is_parsed() {
        let out = engine_error_output(
            r#"{"ename":"TracerBoolConversionError","evalue":"bad","traceback":["a","b"]}"#,
        );
        let Output::Error { ename, evalue, traceback } = out else { panic!() };
        assert_eq!((ename.as_str(), evalue.as_str()), ("TracerBoolConversionError", "bad"));
        assert_eq!(traceback, vec!["a", "b"]);
        let Output::Error { ename, evalue, .. } = engine_error_output("not json") else { panic!() };
        assert_eq!((ename.as_str(), evalue.as_str()), ("Error", "not json"));
    }

    #[test]
    fn a_value_named_like_a_prelude_macro_is_reported_as_undefined() {
        let (name, note) = undefined_value_named_like_macro("expected value, found macro `s`").unwrap();
        assert_eq!(name, "s");
        assert!(note.contains("no value `s` is defined") && note.contains("x.index(s![1.., 0])"), "{note}");
        assert_eq!(undefined_value_named_like_macro("mismatched types"), None);
    }

    #[test]
    fn panic_location_maps_to_cell_line() {
        let cell = "let v = vec![1];\nlet w = v[5];";
        let generated = "fn run() {\n    let v = vec![1];\n        let w = v[5];\n}";
        let json = r#"{"message":"index out of bounds","location":"src/lib.rs:3:17","thread":"main"}"#;
        let Output::Error { ename, evalue, traceback } = panic_output(json, cell, Some(generated)) else { panic!() };
        assert_eq!(ename, "Panic");
        assert_eq!(evalue, "index out of bounds");
        assert_eq!(traceback[0], "panicked at cell:2:9:");
    }

    #[test]
    fn engine_tracebacks_get_cell_locations() {
        let generated = "fn run() {\n    let y = f.call(&x);\n}";
        assert_eq!(
            map_locations_in("  (traced at src/lib.rs:2:13) and src/lib.rs:x", "let y = f.call(&x);", Some(generated)),
            "  (traced at cell:1:9) and src/lib.rs:x"
        );
    }

    #[test]
    fn engine_panics_keep_their_error_class() {
        let json = r#"{"message":"TypeError: add got incompatible shapes","location":"x.rs:1:1","thread":"main"}"#;
        let Output::Error { ename, evalue, traceback } = panic_output(json, "", None) else { panic!() };
        assert_eq!((ename.as_str(), evalue.as_str()), ("TypeError", "add got incompatible shapes"));
        assert_eq!(traceback, vec!["TypeError: add got incompatible shapes", "  (at x.rs:1:1)"]);
        let json = r#"{"message":"Not an Error: x","location":"","thread":""}"#;
        let Output::Error { ename, .. } = panic_output(json, "", None) else { panic!() };
        assert_eq!(ename, "Panic");
    }

    #[test]
    fn ambiguous_or_bare_lines_are_not_mapped() {
        let generated = "fn run() {\n    }\n    let a = 1;\n}";
        assert_eq!(map_location("src/lib.rs:2:5", "}\n}", Some(generated)), None);
        assert_eq!(map_location("src/lib.rs:3:5", "let a = 1;\nlet a = 1;", Some(generated)), None);
        assert_eq!(map_location("src/lib.rs:3:5", "let b = 0;\nlet a = 1;", Some(generated)).as_deref(), Some("cell:2:1"));
    }

    #[test]
    fn displays_are_ordered_and_errors_split_out() {
        let mut m = HashMap::new();
        m.insert("text/html".to_string(), "<b>x</b>".to_string());
        m.insert("text/plain".to_string(), "x".to_string());
        m.insert(ERROR_MIME.to_string(), r#"{"ename":"E","evalue":"v","traceback":[]}"#.to_string());
        let (display, errors) = split_outputs(m, "", None);
        let Some(Output::Display(items)) = display else { panic!() };
        assert_eq!(items[0].0, "text/plain");
        assert_eq!(items[1].0, "text/html");
        assert_eq!(errors.len(), 1);
    }
}
