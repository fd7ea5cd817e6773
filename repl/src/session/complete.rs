//! Cell completeness (for multi-line input and Jupyter's `is_complete`) and the static
//! part of tab completion.
//!
//! The scanner understands enough Rust lexing to not be fooled by brackets inside strings,
//! raw strings, char literals and comments: it tracks open `(` `[` `{`, unterminated
//! strings and block comments (`Incomplete`), and stray or mismatched closers (`Invalid`).

use super::Completeness;

/// Rust keywords offered by completion.
pub const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true",
    "type", "unsafe", "use", "where", "while",
];

/// Names from the engine prelude that completion offers even before rust-analyzer knows
/// them (see docs/engine-api.md).
pub const PRELUDE_NAMES: &[&str] = &[
    "jnp", "jnp::arange", "jnp::zeros", "jnp::ones", "jnp::full", "jnp::linspace",
    "jnp::array", "jnp::add", "jnp::multiply", "jnp::sin", "jnp::cos", "jnp::exp", "jnp::log",
    "jnp::tanh", "jnp::sqrt", "jnp::where_", "jnp::sum", "jnp::mean", "jnp::matmul",
    "jnp::dot", "jnp::reshape", "jnp::transpose", "lax", "jit", "make_jaxpr", "Array",
    "ShapeDtypeStruct", "debug::print!", "config::update", "block_until_ready",
    "effects_barrier", "jax::Error",
];

/// Scans `code` and says whether it forms a complete cell.
///
/// `Incomplete` carries the indent (four spaces per open bracket) for the next line.
pub fn is_complete(code: &str) -> Completeness {
    match scan_brackets(code) {
        Brackets::Balanced => Completeness::Complete,
        Brackets::Unclosed(open) => Completeness::Incomplete(indent(open.len())),
        // Inside a string the next line's indent would become part of the string.
        Brackets::Unterminated { what: "block comment", depth, .. } => Completeness::Incomplete(indent(depth)),
        Brackets::Unterminated { .. } => Completeness::Incomplete(String::new()),
        Brackets::Mismatched { .. } => Completeness::Invalid,
    }
}

/// What [`scan_brackets`] found. Offsets are byte offsets into the scanned text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Brackets {
    /// Every `(` `[` `{`, string and block comment is closed.
    Balanced,
    /// Brackets left open at the end: each one and its offset, outermost first.
    Unclosed(Vec<(char, usize)>),
    /// A string (`"`) or block comment (`/*`) that starts at `at` never ends; `depth`
    /// brackets were open there.
    Unterminated { what: &'static str, at: usize, depth: usize },
    /// A closer at `at` (`found`) that closes nothing, or the wrong bracket: `open` is the
    /// bracket it meets and that bracket's offset.
    Mismatched { found: char, at: usize, open: Option<(char, usize)> },
}

/// Scans `code` for its brackets, strings and comments (see [`Brackets`]).
pub fn scan_brackets(code: &str) -> Brackets {
    scan_code(code, &mut |_, _| {})
}

/// The lines (1-based, ascending, each once) holding `?` operators of `code`: a `?`
/// outside strings, char literals and comments.
pub fn question_mark_lines(code: &str) -> Vec<usize> {
    let mut lines: Vec<usize> = Vec::new();
    scan_code(code, &mut |at, c| {
        // Offsets may fall inside a multi-byte character (`é`): count bytes, never slice.
        if c == b'?' {
            let line = code.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            if lines.last() != Some(&line) {
                lines.push(line);
            }
        }
    });
    lines
}

/// [`scan_brackets`], calling `visit(offset, byte)` for each byte of code outside strings,
/// char literals, comments and identifiers.
fn scan_code(code: &str, visit: &mut dyn FnMut(usize, u8)) -> Brackets {
    let mut stack: Vec<(char, usize)> = Vec::new();
    let b = code.as_bytes();
    let n = b.len();
    let mut i = 0;
    // Whether the previous significant token could end an expression (for 'a vs 'a').
    while i < n {
        let c = b[i];
        match c {
            b'/' if i + 1 < n && b[i + 1] == b'/' => {
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if i + 1 < n && b[i + 1] == b'*' => {
                let start = i;
                let mut depth = 1;
                i += 2;
                while i < n && depth > 0 {
                    if b[i] == b'/' && i + 1 < n && b[i + 1] == b'*' {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && i + 1 < n && b[i + 1] == b'/' {
                        depth -= 1;
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
                if depth > 0 {
                    return Brackets::Unterminated { what: "block comment", at: start, depth: stack.len() };
                }
                continue;
            }
            b'"' => match skip_string(b, i + 1) {
                Some(end) => {
                    i = end;
                    continue;
                }
                None => return Brackets::Unterminated { what: "string", at: i, depth: stack.len() },
            },
            b'r' | b'b' | b'c' if starts_raw_string(b, i) => {
                let mut j = i + 1;
                if b[i] != b'r' {
                    j += 1; // br / cr
                }
                let mut hashes = 0;
                while j < n && b[j] == b'#' {
                    hashes += 1;
                    j += 1;
                }
                // b[j] == '"'
                j += 1;
                let mut closed = None;
                while j < n {
                    if b[j] == b'"' && j + hashes < n + 1 && b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes {
                        closed = Some(j + 1 + hashes);
                        break;
                    }
                    j += 1;
                }
                match closed {
                    Some(end) => {
                        i = end;
                        continue;
                    }
                    None => return Brackets::Unterminated { what: "raw string", at: i, depth: stack.len() },
                }
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}', '"') or a lifetime/label ('a).
                if let Some(end) = char_literal_end(b, i) {
                    i = end;
                    continue;
                }
            }
            b'(' | b'[' | b'{' => stack.push((c as char, i)),
            b')' | b']' | b'}' => {
                let want = match c {
                    b')' => '(',
                    b']' => '[',
                    _ => '{',
                };
                let open = stack.pop();
                if open.map(|(o, _)| o) != Some(want) {
                    return Brackets::Mismatched { found: c as char, at: i, open };
                }
            }
            _ if c.is_ascii_alphanumeric() || c == b'_' => {
                // Skip the whole identifier so `br` inside `abr"` is not a raw string start.
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                // An identifier directly followed by a string quote (b"..", c"..") is
                // handled by the quote branch next round.
                continue;
            }
            _ => visit(i, c),
        }
        i += 1;
    }
    if stack.is_empty() { Brackets::Balanced } else { Brackets::Unclosed(stack) }
}

/// The error for a cell that ends inside a bracket, string or block comment (`let v =
/// vec![1, 2;`): the innermost unclosed delimiter, shown on the user's line and column
/// with what would close it. rustc would instead report a "mismatched closing delimiter"
/// at the brace of the session's generated wrapper, which the user never wrote. The rule
/// is the one the terminal prompt uses to wait for more lines ([`is_complete`]); `None`
/// when the cell is complete (or has a mismatched closer, which rustc reports on the
/// user's own lines).
pub fn unclosed_error(code: &str) -> Option<super::Output> {
    let (head, at, label, fix) = match scan_brackets(code) {
        Brackets::Balanced | Brackets::Mismatched { .. } => return None,
        Brackets::Unclosed(open) => {
            let &(c, at) = open.last()?;
            let (line, column) = line_column(code, at);
            let closers: String = open.iter().rev().map(|(o, _)| closer(*o)).collect();
            let outer = if open.len() > 1 {
                let others: Vec<String> = open[..open.len() - 1]
                    .iter()
                    .rev()
                    .map(|&(o, oat)| {
                        let (l, col) = line_column(code, oat);
                        format!("`{o}` at line {l}, column {col}")
                    })
                    .collect();
                format!(" (inside the unclosed {})", others.join(", "))
            } else {
                String::new()
            };
            (
                format!("unclosed `{c}` opened at cell line {line}, column {column}{outer}: the cell ends before it is closed"),
                at,
                format!("unclosed `{c}`"),
                if open.len() > 1 {
                    format!("close them (`{closers}` in that order, where each one ends), or remove them")
                } else {
                    format!("close it with `{closers}` where its expression ends, or remove it")
                },
            )
        }
        Brackets::Unterminated { what, at, .. } => {
            let (line, column) = line_column(code, at);
            let close = if what == "block comment" { "`*/`" } else { "its closing quote" };
            (
                format!("unterminated {what} starting at cell line {line}, column {column}: the cell ends inside it"),
                at,
                format!("unterminated {what}"),
                format!("end the {what} with {close}"),
            )
        }
    };
    let (line, column) = line_column(code, at);
    let text = code.lines().nth(line - 1).unwrap_or("");
    let num = line.to_string();
    let pad = " ".repeat(num.len());
    let traceback = vec![
        format!("IncompleteInput: {head}"),
        format!("{pad}--> cell:{line}:{column}"),
        format!("{pad} |"),
        format!("{num} | {text}"),
        format!("{pad} | {}^ {label}", " ".repeat(column - 1)),
        format!("fix: {fix}"),
    ];
    Some(super::Output::Error { ename: "IncompleteInput".into(), evalue: format!("{head}; {fix}"), traceback })
}

/// The closing bracket of `open`.
fn closer(open: char) -> char {
    match open {
        '(' => ')',
        '[' => ']',
        _ => '}',
    }
}

/// Line and column (both 1-based; the column in characters) of byte offset `at` of `code`.
fn line_column(code: &str, at: usize) -> (usize, usize) {
    let at = clamp_to_boundary(code, at);
    let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
    (code[..at].matches('\n').count() + 1, code[line_start..at].chars().count() + 1)
}

fn indent(depth: usize) -> String {
    " ".repeat(4 * depth)
}

/// From just after an opening quote, returns the index after the closing quote.
fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Whether a raw string literal (`r"`, `r#"`, `br"`, `cr#"`) starts at `i`, and the byte
/// before it is not part of an identifier.
fn starts_raw_string(b: &[u8], i: usize) -> bool {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return false;
    }
    let mut j = i;
    if b[j] == b'b' || b[j] == b'c' {
        j += 1;
        if j >= b.len() || b[j] != b'r' {
            return false;
        }
    }
    j += 1;
    while j < b.len() && b[j] == b'#' {
        j += 1;
    }
    j < b.len() && b[j] == b'"'
}

/// If a char literal starts at `i` (a `'`), returns the index just after it.
fn char_literal_end(b: &[u8], i: usize) -> Option<usize> {
    let n = b.len();
    if i + 1 >= n {
        return None;
    }
    if b[i + 1] == b'\\' {
        // Escape: find the closing quote within a short distance ('\u{10FFFF}').
        let mut j = i + 2;
        while j < n && j < i + 12 {
            if b[j] == b'\'' {
                return Some(j + 1);
            }
            j += 1;
        }
        return None;
    }
    // One (possibly multi-byte) character followed by a quote.
    let s = std::str::from_utf8(&b[i + 1..]).ok().or_else(|| {
        // Fall back to a lossless view of a valid prefix.
        let valid = std::str::from_utf8(&b[i + 1..]).err()?.valid_up_to();
        std::str::from_utf8(&b[i + 1..i + 1 + valid]).ok()
    })?;
    let ch = s.chars().next()?;
    let after = i + 1 + ch.len_utf8();
    if after < n && b[after] == b'\'' {
        Some(after + 1)
    } else {
        None
    }
}

/// The identifier-or-path prefix that ends at byte `cursor` (e.g. `jnp::ar`), and where it
/// starts. Characters allowed: alphanumerics, `_`, `:`, `%` (for magics), `!`.
pub fn word_before(code: &str, cursor: usize) -> (usize, &str) {
    let cursor = clamp_to_boundary(code, cursor);
    let head = &code[..cursor];
    let start = head
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric() || matches!(c, '_' | ':' | '%'))
        .last()
        .map(|(i, _)| i)
        .unwrap_or(cursor);
    (start, &code[start..cursor])
}

/// The identifier (or path) around byte `cursor`, for inspection.
pub fn word_at(code: &str, cursor: usize) -> &str {
    let cursor = clamp_to_boundary(code, cursor);
    let (start, _) = word_before(code, cursor);
    let tail = &code[cursor..];
    let end = cursor
        + tail
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map(|(i, _)| i)
            .unwrap_or(tail.len());
    code[start..end].trim_start_matches('%').trim_matches(':')
}

/// Moves `pos` back to the nearest char boundary at or before it (and within `s`).
pub fn clamp_to_boundary(s: &str, pos: usize) -> usize {
    let mut pos = pos.min(s.len());
    while !s.is_char_boundary(pos) {
        pos -= 1;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;
    use Completeness::*;

    fn inc(code: &str) -> String {
        match is_complete(code) {
            Incomplete(i) => i,
            other => panic!("expected Incomplete for {code:?}, got {other:?}"),
        }
    }

    #[test]
    fn complete_cells() {
        for code in [
            "let x = 1;",
            "fn f() -> i32 { 1 }",
            "let s = \"(\";",
            "let s = r#\"{ \"quoted\" \"#;",
            "let c = '{';",
            "let c = '\\'';",
            "fn f<'a>(x: &'a str) -> &'a str { x }",
            "// open ( in a comment",
            "/* { */ let x = 1;",
            "%timeit f.call(&x)",
            "",
            "let b = b\"[\"; let c = br\"(\";",
            "let e = 'é';",
        ] {
            assert_eq!(is_complete(code), Complete, "{code:?}");
        }
    }

    #[test]
    fn incomplete_cells_with_indent() {
        assert_eq!(inc("fn f() {"), "    ");
        assert_eq!(inc("let v = vec![(1,"), "        ");
        assert_eq!(inc("let s = \"abc"), "");
        assert_eq!(inc("let s = r#\"abc\"\n"), "");
        assert_eq!(inc("/* comment"), "");
        assert_eq!(inc("fn f() { /* nested /* */"), "    ");
        assert_eq!(inc("%time f.call(&x"), "    ");
    }

    #[test]
    fn invalid_cells() {
        assert_eq!(is_complete("let x = 1; }"), Invalid);
        assert_eq!(is_complete("foo(]"), Invalid);
        assert_eq!(is_complete(")"), Invalid);
    }

    #[test]
    fn words() {
        assert_eq!(word_before("let y = jnp::ar", 15), (8, "jnp::ar"));
        assert_eq!(word_before("%tim", 4), (0, "%tim"));
        assert_eq!(word_before("x.si", 4), (2, "si"));
        assert_eq!(word_before("é", 1), (0, ""));
        assert_eq!(word_at("f.call(&xyz)", 9), "xyz");
        assert_eq!(word_at("jnp::arange(8.0)", 6), "jnp::arange");
    }

    #[test]
    fn an_unclosed_delimiter_names_the_users_line_and_the_fix() {
        let Some(super::super::Output::Error { ename, evalue, traceback }) = unclosed_error("let v = vec![1, 2;") else { panic!() };
        assert_eq!(ename, "IncompleteInput");
        assert_eq!(
            evalue,
            "unclosed `[` opened at cell line 1, column 13: the cell ends before it is closed; close it with `]` where its expression ends, or remove it"
        );
        assert_eq!(
            traceback,
            vec![
                "IncompleteInput: unclosed `[` opened at cell line 1, column 13: the cell ends before it is closed",
                " --> cell:1:13",
                "  |",
                "1 | let v = vec![1, 2;",
                "  |             ^ unclosed `[`",
                "fix: close it with `]` where its expression ends, or remove it",
            ]
        );
        // Nested: the innermost is shown, the outer ones named; non-ASCII columns count chars.
        let Some(super::super::Output::Error { evalue, traceback, .. }) = unclosed_error("let é = 1;\nfn f() {\n    let t = (é, 2;") else { panic!() };
        assert!(evalue.starts_with("unclosed `(` opened at cell line 3, column 13 (inside the unclosed `{` at line 2, column 8)"), "{evalue}");
        assert!(evalue.ends_with("close them (`)}` in that order, where each one ends), or remove them"), "{evalue}");
        assert_eq!(traceback[3], "3 |     let t = (é, 2;");
        let Some(super::super::Output::Error { evalue, .. }) = unclosed_error("let s = \"abc;") else { panic!() };
        assert_eq!(evalue, "unterminated string starting at cell line 1, column 9: the cell ends inside it; end the string with its closing quote");
        // Complete cells and mismatched closers (rustc's own message is on the user's lines) give none.
        assert_eq!(unclosed_error("let v = vec![1, 2];"), None);
        assert_eq!(unclosed_error("fn g() {\n    let b = (1, 2;\n}"), None);
    }
}
