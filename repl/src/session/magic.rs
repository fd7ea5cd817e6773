//! Magics: `%name ARGS` at the start of a cell, rewritten into one engine call.
//!
//! There is one mechanism (docs/engine-api.md): the magic line becomes a Rust expression
//! that calls `jax::magic::<name>(|| ARGS)` in the evaluation child, so the argument is
//! parsed and type-checked once, by rustc, like any other cell. The argument is the rest of
//! the cell after the magic name, so it may span several lines. The rewrite keeps the
//! argument on its original line, so compile errors still point at the cell's own lines.

/// How a magic's argument is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MagicArg {
    /// `%name CALL`: CALL (required) becomes the body of a closure.
    Call,
    /// `%name`: no argument allowed.
    None,
    /// `%name [--stage NAME] CALL`: as `Call`; with `--stage NAME` the engine function
    /// `<function>_stage("NAME", || CALL)` is called instead (the engine checks the name).
    StageCall,
    /// `%name [VALUE]` calls `<function>("VALUE")` (a word, or empty); `%name compare CALL`
    /// calls `<function>_compare(|| CALL)` (`%precision`).
    WordOrCompare,
    /// An expression passed by reference, `<function>(&(EXPR))` (`%sharding x`).
    Ref,
    /// An optional expression by reference: `<function>(None)` or
    /// `<function>(Some(&(EXPR)))` (`%mesh`, `%mesh m`).
    OptRef,
}

/// One known magic.
#[derive(Debug, Clone, Copy)]
pub struct MagicSpec {
    /// Name without the `%`.
    pub name: &'static str,
    /// The engine function it calls (`jax::magic::<function>`).
    pub function: &'static str,
    /// Argument form.
    pub arg: MagicArg,
    /// One line of help.
    pub summary: &'static str,
}

/// Every magic the session knows, in the order `%help` lists them.
pub const MAGICS: &[MagicSpec] = &[
    MagicSpec { name: "jaxpr", function: "jaxpr", arg: MagicArg::Call, summary: "run CALL and show the jaxpr of its (last) jitted call; f.trace(&x) shows it without running" },
    MagicSpec { name: "lower", function: "lower", arg: MagicArg::Call, summary: "show the MLIR module CALL lowers to" },
    MagicSpec { name: "compile", function: "compile", arg: MagicArg::StageCall, summary: "show the optimized IR of CALL's compiled executable (--stage jaxpr|lowered|opt|llvm|asm)" },
    MagicSpec { name: "diff-passes", function: "diff_passes", arg: MagicArg::Call, summary: "show the IR diff of each compile pass that changed CALL's module" },
    MagicSpec { name: "cost", function: "cost", arg: MagicArg::Call, summary: "show the cost analysis (flops, bytes accessed) of CALL" },
    MagicSpec { name: "time", function: "time", arg: MagicArg::Call, summary: "run CALL once and print its wall time" },
    MagicSpec { name: "timeit", function: "timeit", arg: MagicArg::Call, summary: "run CALL many times; print mean ± std per run" },
    MagicSpec { name: "profile", function: "profile", arg: MagicArg::Call, summary: "run CALL under the profiler; show its timeline (SVG) and a summary table" },
    MagicSpec { name: "memory", function: "memory", arg: MagicArg::None, summary: "show memory_stats() and the live buffers by allocation site" },
    MagicSpec { name: "explain", function: "explain", arg: MagicArg::None, summary: "explain the last cache misses" },
    MagicSpec { name: "eqn-count", function: "eqn_counts", arg: MagicArg::Call, summary: "count CALL's jaxpr equations per source line" },
    MagicSpec { name: "precision", function: "precision", arg: MagicArg::WordOrCompare, summary: "show/set jax_default_matmul_precision (%precision highest|BF16_BF16_F32|none); %precision compare CALL: each preset's error and time" },
    MagicSpec { name: "sharding", function: "sharding", arg: MagicArg::Ref, summary: "draw which devices hold which block of array X (coloured; HTML in Jupyter)" },
    MagicSpec { name: "mesh", function: "mesh", arg: MagicArg::OptRef, summary: "draw the devices of mesh M (default: the one set with set_mesh) by axis" },
    MagicSpec { name: "help", function: "help", arg: MagicArg::None, summary: "list the magics" },
];

/// Result of looking at a cell for a magic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// The cell has no magic; evaluate it as it is.
    NotMagic,
    /// The cell's magic, rewritten into Rust to evaluate instead of the cell.
    Code(String),
    /// The magic is unknown or malformed; the message says why (and lists the magics).
    Error(String),
}

/// The list of magics as one line, e.g. `%jaxpr, %lower, ...`.
pub fn magic_names() -> String {
    MAGICS
        .iter()
        .map(|m| format!("%{}", m.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Plain-text help for the magics and the session (what `%help` shows without an engine).
/// A magic's usage line as `%help` shows it (`%timeit CALL`, `%sharding X`, `%memory`).
fn usage(m: &MagicSpec) -> String {
    match m.arg {
        MagicArg::Call => format!("%{} CALL", m.name),
        MagicArg::StageCall => format!("%{} [--stage S] CALL", m.name),
        MagicArg::WordOrCompare => format!("%{} [V|compare CALL]", m.name),
        MagicArg::None => format!("%{}", m.name),
        MagicArg::Ref => format!("%{} X", m.name),
        MagicArg::OptRef => format!("%{} [M]", m.name),
    }
}

pub fn help_text() -> String {
    let mut text = String::from(
        "Magics (each on its own line, after any Rust statements; CALL ends where its line closes its brackets, and later lines, other magics included, run after the magic):\n",
    );
    for m in MAGICS {
        text.push_str(&format!("  {:<16} {}\n", usage(m), m.summary));
    }
    text.push_str(
        "CALL is a Rust expression, e.g. `%timeit f.call(&x)`.\n\
         evcxr commands start with `:` (`:vars`, `:dep`, `:help`).\n",
    );
    text
}

/// Where the user's argument of a rewritten magic line sits, so that compile errors can
/// be shown on the user's own line: the magic's line (1-based) and the character column
/// (0-based) where the argument starts in the user's line and in the rewritten line.
/// Columns before `code_start` fall in the generated call (`jax::magic::jaxpr(|| `).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MagicColumns {
    /// The magic's line in the cell (1-based).
    pub line: usize,
    /// Column (0-based, characters) of the `%` in the user's line.
    pub percent: usize,
    /// Column (0-based, characters) where the argument starts in the user's line.
    pub user_start: usize,
    /// Column (0-based, characters) where the same text starts in the rewritten line.
    pub code_start: usize,
}

impl MagicColumns {
    /// The user's column (1-based) for a column (1-based) of the rewritten magic line:
    /// inside the argument it moves with the argument; inside the generated call it is the
    /// `%`.
    pub fn user_column(&self, code_column: usize) -> usize {
        match code_column.checked_sub(1 + self.code_start) {
            Some(k) => self.user_start + k + 1,
            None => self.percent + 1,
        }
    }
}

/// Finds a magic in `cell` and rewrites it (see [`rewrite_mapped`]).
pub fn rewrite(cell: &str) -> Rewrite {
    rewrite_mapped(cell).0
}

/// Finds a magic in `cell` and rewrites it; with the columns of its argument for mapping
/// compile errors back to the user's line.
///
/// The magic is the first non-blank line when it starts with `%`, or else a later line
/// starting with `%NAME` that follows complete Rust statements (the text before it has
/// balanced brackets and ends with `;` or `}`): those statements run first, in the same
/// cell, and the magic's value is the cell's value. A `%%name` spelling is accepted as
/// `%name`. The argument is everything after the name, up to the end of the cell.
pub fn rewrite_mapped(cell: &str) -> (Rewrite, Option<MagicColumns>) {
    let Some(start) = magic_line_start(cell) else {
        return (Rewrite::NotMagic, None);
    };
    let rest = &cell[start..];
    let indent = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let rest = &rest[indent..];
    let Some(after_pct) = rest.strip_prefix('%') else {
        return (Rewrite::NotMagic, None);
    };
    let after_pct = after_pct.strip_prefix('%').unwrap_or(after_pct);
    let name_len = after_pct
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(after_pct.len());
    let name = &after_pct[..name_len];
    let arg = &after_pct[name_len..];
    // Everything before the magic (blank lines, or Rust statements) is kept, so line
    // numbers are unchanged.
    let prefix = &cell[..start];
    let line = prefix.matches('\n').count() + 1;
    let Some(spec) = MAGICS.iter().find(|m| m.name == name) else {
        let shown = if name.is_empty() { "%".to_string() } else { format!("%{name}") };
        return (Rewrite::Error(format!("unknown magic `{shown}` on line {line}; the magics are: {}", magic_names())), None);
    };
    match magic_call(spec, arg) {
        Ok((head, body, tail)) => {
            let chars = |s: &str| s.chars().count();
            let body_offset = body.as_ptr() as usize - cell.as_ptr() as usize;
            let body_offset = if body.is_empty() { start + indent } else { body_offset };
            if let Some(msg) = unbalanced_argument(spec, cell, start + indent, body_offset, body) {
                return (Rewrite::Error(msg), None);
            }
            if let Some(msg) = second_expression(spec, body, line) {
                return (Rewrite::Error(msg), None);
            }
            let columns = MagicColumns {
                line,
                percent: chars(&cell[start..start + indent]),
                user_start: chars(&cell[start..body_offset]),
                code_start: chars(&head),
            };
            // Shown by an explicit `.evcxr_display()` statement rather than as the cell's
            // final expression: evcxr falls back to Debug formatting (`Ok(ShardingView { .. })`)
            // when a final expression fails to compile once, which a magic's argument that
            // moves a session variable (`%sharding x + 1`) makes it do.
            (Rewrite::Code(format!("{prefix}{head}{body}{tail}.evcxr_display();")), Some(columns))
        }
        // The argument's own errors name the user's line and the magic's usage.
        Err(msg) if msg.contains("\nusage: ") => (Rewrite::Error(msg), None),
        Err(msg) => (Rewrite::Error(format!("{msg} (line {line})\nusage: {}", usage(spec))), None),
    }
}

/// The error for a magic argument whose brackets, strings or comments do not balance
/// (`%jaxpr f.call(x`), shown on the user's own line and column with a fix, rather than
/// rustc's error about the generated closure; `None` when the argument balances.
/// `magic_at` and `body_at` are the byte offsets in `cell` of the `%` and of `body`.
fn unbalanced_argument(spec: &MagicSpec, cell: &str, magic_at: usize, body_at: usize, body: &str) -> Option<String> {
    use super::complete::{Brackets, scan_brackets};
    let found = scan_brackets(body);
    if found == Brackets::Balanced {
        return None;
    }
    // Line (1-based) and column (1-based, characters) of a cell offset, and the line's text.
    let place = |at: usize| {
        let line_start = cell[..at].rfind('\n').map_or(0, |i| i + 1);
        let line_end = cell[at..].find('\n').map_or(cell.len(), |i| at + i);
        let line = cell[..at].matches('\n').count() + 1;
        (line, cell[line_start..at].chars().count() + 1, &cell[line_start..line_end])
    };
    let show = |at: usize, label: &str| {
        let (line, column, text) = place(at);
        let num = line.to_string();
        let pad = " ".repeat(num.len());
        format!("{pad}--> cell:{line}:{column}\n{pad} |\n{num} | {text}\n{pad} | {}^ {label}", " ".repeat(column - 1))
    };
    let name = spec.name;
    let magic_line_end = cell[magic_at..].find('\n').map_or(cell.len(), |i| magic_at + i);
    let (head, fix) = match found {
        Brackets::Balanced => return None,
        Brackets::Unclosed(open) => {
            let (c, at) = *open.last()?;
            let (line, column, _) = place(body_at + at);
            let closers: String = open.iter().rev().map(|(o, _)| match o {
                '(' => ')',
                '[' => ']',
                _ => '}',
            }).collect();
            let fix = if body.contains('\n') {
                format!("add `{closers}` at the end of the expression")
            } else {
                format!("`{}{closers}`", cell[magic_at..magic_line_end].trim_end().trim_end_matches(';'))
            };
            (
                format!("%{name}'s expression is not complete: the `{c}` at line {line}, column {column} is never closed\n{}", show(body_at + at, &format!("unclosed `{c}`"))),
                fix,
            )
        }
        Brackets::Unterminated { what, at, .. } => {
            let (line, column, _) = place(body_at + at);
            let close = if what == "block comment" { "`*/`" } else { "its closing quote" };
            (
                format!("%{name}'s expression is not complete: the {what} at line {line}, column {column} never ends\n{}", show(body_at + at, &format!("unterminated {what}"))),
                format!("end the {what} with {close}"),
            )
        }
        Brackets::Mismatched { found, at, open } => {
            let (line, column, _) = place(body_at + at);
            let (head, fix) = match open {
                None => (format!("the `{found}` at line {line}, column {column} closes nothing"), format!("remove that `{found}`, or open it earlier")),
                Some((o, oat)) => {
                    let (ol, oc, _) = place(body_at + oat);
                    (
                        format!("the `{found}` at line {line}, column {column} does not match the `{o}` at line {ol}, column {oc}"),
                        format!("make the brackets pair up (`{o}` closes with `{}`)", match o { '(' => ')', '[' => ']', _ => '}' }),
                    )
                }
            };
            (format!("%{name}'s expression has mismatched brackets: {head}\n{}", show(body_at + at, &format!("unexpected `{found}`"))), fix)
        }
    };
    Some(format!("{head}\nfix: {fix}"))
}

/// The error for a magic that takes one expression given two (`%sharding x x`,
/// `%mesh m, n`), on line `line` of the cell, with the usage; `None` otherwise. Without
/// it rustc would see `&(x x)` and talk about the generated code (a tuple).
fn second_expression(spec: &MagicSpec, body: &str, line: usize) -> Option<String> {
    let (what, example) = match spec.arg {
        MagicArg::Ref | MagicArg::OptRef => ("one expression", "x"),
        // `%cost 3 4`: rustc would report the generated closure `|| (3 4)`.
        MagicArg::Call | MagicArg::StageCall => ("one expression (a call)", "f.call(&x)"),
        MagicArg::None | MagicArg::WordOrCompare => return None,
    };
    let usage = usage(spec);
    let at = second_expression_at(body)?;
    let name = spec.name;
    Some(format!(
        "%{name} takes {what}, but line {line} has more: `{}` (a second one starts at `{}`)\nusage: {usage}, e.g. `%{name} {example}`",
        body.trim(),
        body[at..].trim()
    ))
}

/// Where a second expression starts in `body` (byte offset), outside brackets: after a
/// `,`, or a word or literal that follows another operand with only space between
/// (`x y`, `x "a"`); keywords (`as`, `if`, `else`, `move`, ...) join parts of one
/// expression. Strings and char literals are skipped.
fn second_expression_at(body: &str) -> Option<usize> {
    const JOINERS: &[&str] = &["as", "if", "else", "match", "in", "move", "mut", "ref", "unsafe", "async", "return", "loop", "while", "for", "dyn", "impl"];
    #[derive(Clone, Copy, PartialEq)]
    enum Last {
        Nothing,
        Operand,
        Other,
    }
    let b = body.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (mut i, mut depth, mut last, mut gap) = (0, 0usize, Last::Nothing, false);
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            gap = true;
            i += 1;
            continue;
        }
        let start = i;
        let kind = if word(c) {
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            if JOINERS.contains(&&body[start..i]) { Last::Other } else { Last::Operand }
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            Last::Operand
        } else {
            i += 1;
            match c {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => {
                    let rest = &body[i..];
                    return (!rest.trim().is_empty()).then(|| i + (rest.len() - rest.trim_start().len()));
                }
                _ => {}
            }
            if matches!(c, b')' | b']' | b'}') { Last::Operand } else { Last::Other }
        };
        if depth == 0 && gap && last == Last::Operand && kind == Last::Operand && (word(c) || c == b'"') {
            return Some(start);
        }
        if depth == 0 || (depth == 1 && matches!(c, b'(' | b'[' | b'{')) {
            last = kind;
        }
        gap = false;
    }
    None
}

/// Where the code after a cell's magic starts (a byte offset, at a line start), when the
/// magic is followed by more Rust on later lines: `%jaxpr f.call(&x)` then
/// `println!("done");` runs the magic (its output shown), then those lines as code, as a
/// Jupyter user expects of a line magic. `None` when the magic's argument runs to the
/// cell's end (or there is no magic).
///
/// The argument ends with the first line at which its brackets, strings and comments are
/// closed, unless the expression visibly goes on: that line ends with an operator, `,` or
/// `.`; the next non-blank line starts with `.`, `?`, `as`, `else` or a binary operator
/// (`x\n    .clone()`); or a magic that needs an expression has none yet on its line
/// (`%time` then `{ ... }` on the next lines).
pub fn split_after_magic(cell: &str) -> Option<usize> {
    use super::complete::{Brackets, scan_brackets};
    let start = magic_line_start(cell)?;
    let rest = cell[start..].trim_start_matches([' ', '\t']);
    let after_pct = rest.strip_prefix('%')?;
    let after_pct = after_pct.strip_prefix('%').unwrap_or(after_pct);
    let name_len = after_pct
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(after_pct.len());
    let needs_arg = MAGICS
        .iter()
        .find(|m| m.name == &after_pct[..name_len])
        .is_some_and(|m| matches!(m.arg, MagicArg::Call | MagicArg::StageCall | MagicArg::Ref));
    let mut end = start;
    let lines: Vec<&str> = cell[start..].split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        end += line.len();
        let so_far = &cell[start..end];
        if scan_brackets(so_far) != Brackets::Balanced {
            continue;
        }
        if i == 0 && needs_arg && after_pct[name_len..].lines().next().unwrap_or("").trim().is_empty() {
            continue;
        }
        if ends_with_continuation(line) {
            continue;
        }
        let next = lines[i + 1..].iter().map(|l| l.trim()).find(|l| !l.is_empty() && !l.starts_with("//"));
        match next {
            None => return None,
            Some(next) if starts_with_continuation(next) => continue,
            Some(_) => return Some(end),
        }
    }
    None
}

/// Whether a magic argument's `line` cannot end the expression (a trailing operator, `,`
/// or `.`; a `//` comment is ignored only when it is the whole line).
fn ends_with_continuation(line: &str) -> bool {
    let t = line.trim_end();
    if t.trim_start().starts_with("//") {
        return false;
    }
    const TRAILING: &[&str] = &[",", ".", "=", "+", "-", "*", "/", "%", "&&", "||", "&", "|", "^", "<", ">", "=>", "->", " as"];
    TRAILING.iter().any(|op| t.ends_with(op)) && !t.ends_with("..")
}

/// Whether a line (trimmed) continues the expression of the line before it.
fn starts_with_continuation(t: &str) -> bool {
    if t.starts_with("//") {
        return false;
    }
    if t.starts_with('.') || t.starts_with('?') || t.starts_with("as ") || t.starts_with("else") {
        return true;
    }
    const BINARY: &[&str] = &["&&", "||", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "=", "&", "|", "^"];
    BINARY.iter().any(|op| t.strip_prefix(op).is_some_and(|r| r.starts_with(char::is_whitespace)))
}

/// The byte offset of the line holding the cell's magic, if any: the first non-blank line
/// when it starts with `%`; else the first line starting with `%` and a letter whose
/// preceding text is complete Rust statements (balanced, ending with `;` or `}`), since
/// such a line cannot continue an expression (`a\n% b` is a remainder).
fn magic_line_start(cell: &str) -> Option<usize> {
    let mut offset = 0;
    let mut first = true;
    for line in cell.split_inclusive('\n') {
        let t = line.trim_start_matches([' ', '\t']);
        if first {
            // Blank and `//` comment lines may come before a magic on the cell's first lines.
            if line.trim().is_empty() || t.starts_with("//") {
                offset += line.len();
                continue;
            }
            if t.starts_with('%') {
                return Some(offset);
            }
            first = false;
        } else if let Some(after) = t.strip_prefix('%')
            && after.trim_start_matches('%').starts_with(|c: char| c.is_ascii_alphabetic())
        {
            let before = without_trailing_comments(&cell[..offset]);
            if (before.ends_with(';') || before.ends_with('}'))
                && super::complete::is_complete(before) == super::Completeness::Complete
            {
                return Some(offset);
            }
        }
        offset += line.len();
    }
    None
}

/// `text` without its trailing blank and `//` comment lines, and without a `//` comment
/// ending its last line when the Rust before that comment is complete (`let y = 1; // note`),
/// so a magic may follow statements and comments (`let y = 1;\n// time it\n%timeit ..`).
fn without_trailing_comments(text: &str) -> &str {
    let mut head = text.trim_end();
    loop {
        let line_start = head.rfind('\n').map_or(0, |i| i + 1);
        let line = &head[line_start..];
        if line.trim_start().starts_with("//") {
            head = head[..line_start].trim_end();
            if head.is_empty() {
                return head;
            }
            continue;
        }
        if let Some(i) = line.find("//") {
            let code = head[..line_start + i].trim_end();
            if super::complete::is_complete(code) == super::Completeness::Complete {
                return code;
            }
        }
        return head;
    }
}

/// IPython's `%timeit`/`%time` options at the start of a magic's argument (`-n 10`,
/// `-r 3`, `-q`, `-o`, `-p 4`): the option as written, e.g. `-n 10`. A unary minus on an
/// expression (`-x.sum()`) is not an option.
fn ipython_option(arg: &str) -> Option<String> {
    let a = arg.trim_start_matches([' ', '\t']);
    let rest = a.strip_prefix('-')?;
    let flag = rest.chars().next()?;
    let after = &rest[flag.len_utf8()..];
    if !"nrqop".contains(flag) || !(after.is_empty() || after.starts_with([' ', '\t', '\n'])) {
        return None;
    }
    let value = after.trim_start_matches([' ', '\t']);
    let digits = value.chars().take_while(char::is_ascii_digit).count();
    match flag {
        'n' | 'r' | 'p' if digits > 0 => Some(format!("-{flag} {}", &value[..digits])),
        'q' | 'o' => Some(format!("-{flag}")),
        _ => None,
    }
}

/// The rewritten call of magic `spec` with argument text `arg` (what follows the name):
/// the generated text before the user's argument, the argument itself (a slice of `arg`),
/// and the generated text after it; or the error message.
fn magic_call<'a>(spec: &MagicSpec, arg: &'a str) -> Result<(String, &'a str, String), String> {
    let f = spec.function;
    match spec.arg {
        MagicArg::WordOrCompare => {
            let a = arg.trim_start_matches([' ', '\t']);
            if let Some(call) = a.strip_prefix("compare").filter(|r| r.is_empty() || r.starts_with(char::is_whitespace)) {
                let body = call.trim_end();
                let body = body.strip_suffix(';').unwrap_or(body).trim_end();
                if body.trim().is_empty() {
                    return Err(format!(
                        "%{} compare needs an expression to run, e.g. `%{} compare f.call(&x)`",
                        spec.name, spec.name
                    ));
                }
                let body = body.strip_prefix([' ', '\t']).unwrap_or(body);
                return Ok((format!("jax::magic::{f}_compare(|| "), body, ")".into()));
            }
            let word = a.trim();
            if !word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "%{} takes a precision name (highest, high, default, BF16_BF16_F32, none, ...) or `compare CALL`, got `{word}`",
                    spec.name
                ));
            }
            Ok((format!("jax::magic::{f}(\""), word, "\")".into()))
        }
        MagicArg::Ref | MagicArg::OptRef => {
            let body = arg.trim();
            let body = body.strip_suffix(';').unwrap_or(body).trim();
            match (body.is_empty(), spec.arg) {
                (true, MagicArg::OptRef) => Ok((format!("jax::magic::{f}(None)"), body, String::new())),
                (true, _) => Err(format!("%{} needs an array, e.g. `%{} x`", spec.name, spec.name)),
                (false, MagicArg::OptRef) => Ok((format!("jax::magic::{f}(Some(&("), body, ")))".into())),
                (false, _) => Ok((format!("jax::magic::{f}(&("), body, "))".into())),
            }
        }
        MagicArg::None => {
            if !arg.trim().is_empty() {
                return Err(format!("%{} takes no argument (got `{}`)", spec.name, arg.trim()));
            }
            Ok((format!("jax::magic::{f}()"), &arg[..0], String::new()))
        }
        MagicArg::Call | MagicArg::StageCall => {
            if let Some(flag) = ipython_option(arg) {
                let what = match spec.name {
                    "timeit" => "it picks the loop count itself (each of its 7 runs takes at least 0.2 s) and waits for every result",
                    _ => "it runs CALL once and waits for its result",
                };
                return Err(format!(
                    "%{} takes no options (IPython's `{flag}`): {what}; write `%{} f.call(&x)`",
                    spec.name, spec.name
                ));
            }
            // `--stage NAME` (same line) selects `<function>_stage("NAME", ..)`.
            let (function, arg) = match arg.trim_start_matches([' ', '\t']).strip_prefix("--stage") {
                Some(rest) if spec.arg == MagicArg::StageCall => {
                    let rest = rest.trim_start_matches([' ', '\t', '=']);
                    let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
                    let stage = &rest[..end];
                    if stage.is_empty() || !stage.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Err(format!(
                            "%{} --stage needs a stage name (jaxpr, lowered, opt, llvm, asm), e.g. `%{} --stage asm f.call(&x)`",
                            spec.name, spec.name
                        ));
                    }
                    (format!("{f}_stage(\"{stage}\", "), &rest[end..])
                }
                _ => (format!("{f}("), arg),
            };
            // The argument keeps its own lines; a trailing `;` would make it a statement.
            let body = arg.trim_end();
            let body = body.strip_suffix(';').unwrap_or(body).trim_end();
            if body.trim().is_empty() {
                return Err(format!("%{} needs an expression to run, e.g. `%{} f.call(&x)`", spec.name, spec.name));
            }
            let body = body.strip_prefix([' ', '\t']).unwrap_or(body);
            Ok((format!("jax::magic::{function}|| "), body, ")".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code a magic cell becomes, without the display statement every rewrite ends
    /// with (checked by `every_rewrite_displays_its_value_by_a_statement`).
    fn code(cell: &str) -> String {
        match rewrite(cell) {
            Rewrite::Code(c) => c.strip_suffix(".evcxr_display();").map(str::to_string).unwrap_or_else(|| panic!("no display statement: {c:?}")),
            other => panic!("expected code for {cell:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_magic_may_follow_comment_lines() {
        assert_eq!(code("// time it\n%jaxpr f.call(&x)"), "// time it\njax::magic::jaxpr(|| f.call(&x))");
        assert_eq!(code("let y = 1;\n// a comment\n%jaxpr f.call(&y)"), "let y = 1;\n// a comment\njax::magic::jaxpr(|| f.call(&y))");
        assert_eq!(code("let y = 1; // note\n%sharding y"), "let y = 1; // note\njax::magic::sharding(&(y))");
        // A `//` inside a string does not end the statement before it.
        assert_eq!(rewrite("let s = \"a // b\n%x"), Rewrite::NotMagic);
        assert_eq!(rewrite("let y = 1 + // more\n%x"), Rewrite::NotMagic);
    }

    #[test]
    fn every_rewrite_displays_its_value_by_a_statement() {
        for cell in ["%sharding x + 1", "%jaxpr f.call(x)", "%memory", "%mesh", "let y = 1;\n%cost f.call(&y)"] {
            let Rewrite::Code(c) = rewrite(cell) else { panic!("{cell}") };
            assert!(c.ends_with(").evcxr_display();"), "{c}");
        }
    }

    #[test]
    fn a_second_expression_for_a_one_expression_magic_is_a_magic_error() {
        let Rewrite::Error(e) = rewrite("%sharding x x") else { panic!() };
        assert_eq!(e, "%sharding takes one expression, but line 1 has more: `x x` (a second one starts at `x`)\nusage: %sharding X, e.g. `%sharding x`");
        // A CALL magic given two expressions; one call (with spaces, keywords, blocks) is fine.
        let Rewrite::Error(e) = rewrite("%cost 3 4") else { panic!() };
        assert_eq!(e, "%cost takes one expression (a call), but line 1 has more: `3 4` (a second one starts at `4`)\nusage: %cost CALL, e.g. `%cost f.call(&x)`");
        let Rewrite::Error(e) = rewrite("%compile --stage asm f.call(&x) y") else { panic!() };
        assert!(e.starts_with("%compile takes one expression (a call), but line 1 has more: `f.call(&x) y`"), "{e}");
        for ok in ["%time for i in 0..3 { f.call(&x); }", "%timeit f.call(&x) as i32", "%cost if a { f.call(&x) } else { g.call(&x) }", "%time move || f.call(&x)"] {
            assert!(matches!(rewrite(ok), Rewrite::Code(_)), "{ok}");
        }
        let Rewrite::Error(e) = rewrite("let m = 1;\n%mesh m, n;") else { panic!() };
        assert!(e.starts_with("%mesh takes one expression, but line 2 has more: `m, n` (a second one starts at `n`)\nusage: %mesh [M]"), "{e}");
        assert!(matches!(rewrite("%sharding ys[0] \"a\""), Rewrite::Error(_)));
        // One expression, with spaces, keywords, calls, closures, strings and tuples.
        for one in ["%sharding x", "%sharding &x + 1.0", "%sharding ys[0]", "%sharding x as f32", "%sharding f(a, b)",
            "%sharding if c { x } else { y }", "%sharding (move |v: Array| v)(x)", "%sharding g(\"a b\")", "%sharding x\n    .clone()", "%mesh"] {
            assert!(matches!(rewrite(one), Rewrite::Code(_)), "{one}");
        }
    }

    #[test]
    fn precision_magic() {
        assert_eq!(code("%precision"), "jax::magic::precision(\"\")");
        assert_eq!(code("%precision highest\n"), "jax::magic::precision(\"highest\")");
        assert_eq!(code("%precision compare f.call(&x);"), "jax::magic::precision_compare(|| f.call(&x))");
        assert!(matches!(rewrite("%precision compare"), Rewrite::Error(_)));
        assert!(matches!(rewrite("%precision a b"), Rewrite::Error(_)));
    }

    #[test]
    fn call_magics_become_closures() {
        assert_eq!(code("%jaxpr f.call(&x)"), "jax::magic::jaxpr(|| f.call(&x))");
        assert_eq!(code("%lower f.call(&x)\n"), "jax::magic::lower(|| f.call(&x))");
        assert_eq!(code("%compile g.call((&x, &y));"), "jax::magic::compile(|| g.call((&x, &y)))");
        assert_eq!(code("%cost f.call(&x)"), "jax::magic::cost(|| f.call(&x))");
        assert_eq!(code("%time f.call(&x)"), "jax::magic::time(|| f.call(&x))");
        assert_eq!(code("%timeit   f.call(&x)  "), "jax::magic::timeit(||   f.call(&x))");
        assert_eq!(code("%profile f.call(&x)"), "jax::magic::profile(|| f.call(&x))");
    }

    #[test]
    fn compile_stage_and_diff_passes() {
        assert_eq!(code("%compile --stage asm f.call(&x)"), "jax::magic::compile_stage(\"asm\", || f.call(&x))");
        assert_eq!(code("%compile --stage=llvm f.call(&x);"), "jax::magic::compile_stage(\"llvm\", || f.call(&x))");
        assert_eq!(code("%diff-passes f.call(&x)"), "jax::magic::diff_passes(|| f.call(&x))");
        let Rewrite::Error(e) = rewrite("%compile --stage") else { panic!() };
        assert!(e.starts_with("%compile --stage needs a stage name"), "{e}");
        let Rewrite::Error(e) = rewrite("%compile --stage asm") else { panic!() };
        assert_eq!(e, "%compile needs an expression to run, e.g. `%compile f.call(&x)` (line 1)\nusage: %compile [--stage S] CALL");
    }

    #[test]
    fn no_arg_magics() {
        assert_eq!(code("%explain"), "jax::magic::explain()");
        assert_eq!(code("%memory"), "jax::magic::memory()");
        assert_eq!(code("%eqn-count slow.call(&x)"), "jax::magic::eqn_counts(|| slow.call(&x))");
        assert_eq!(code("  %help  \n"), "jax::magic::help()");
        assert_eq!(code("%sharding x"), "jax::magic::sharding(&(x))");
        assert_eq!(code("%sharding ys[0];"), "jax::magic::sharding(&(ys[0]))");
        assert_eq!(code("%mesh"), "jax::magic::mesh(None)");
        assert_eq!(code("%mesh m2\n"), "jax::magic::mesh(Some(&(m2)))");
        assert!(matches!(rewrite("%sharding"), Rewrite::Error(_)));
    }

    #[test]
    fn cell_magic_spelling_and_multiline_argument_keep_lines() {
        assert_eq!(
            code("\n%%time {\n    let y = f.call(&x)?;\n    y\n}"),
            "\njax::magic::time(|| {\n    let y = f.call(&x)?;\n    y\n})"
        );
    }

    #[test]
    fn not_magic() {
        assert_eq!(rewrite("let x = 1 % 2;"), Rewrite::NotMagic);
        assert_eq!(rewrite(""), Rewrite::NotMagic);
        // A `%` line continuing an expression is Rust's remainder.
        assert_eq!(rewrite("x\n%time y"), Rewrite::NotMagic);
        assert_eq!(rewrite("let r = a\n    % b;"), Rewrite::NotMagic);
        assert_eq!(rewrite("let v = vec![1,\n%x];"), Rewrite::NotMagic);
    }

    #[test]
    fn a_magic_after_statements_runs_after_them() {
        assert_eq!(code("let y = 1;\n%jaxpr f.call(x)"), "let y = 1;\njax::magic::jaxpr(|| f.call(x))");
        assert_eq!(
            code("fn g(x: Array) -> Array { x }\n\n  %time g(x.clone())\n"),
            "fn g(x: Array) -> Array { x }\n\njax::magic::time(|| g(x.clone()))"
        );
        let Rewrite::Error(e) = rewrite("let y = 1;\n%jaxp f.call(x)") else { panic!() };
        assert!(e.starts_with("unknown magic `%jaxp` on line 2; the magics are: %jaxpr,"), "{e}");
        let Rewrite::Error(e) = rewrite("let y = 1;\n%time") else { panic!() };
        assert_eq!(e, "%time needs an expression to run, e.g. `%time f.call(&x)` (line 2)\nusage: %time CALL");
    }

    #[test]
    fn argument_columns_map_back_to_the_users_line() {
        let (r, cols) = rewrite_mapped("let y = 1;\n  %jaxpr f.call(&nope)");
        assert_eq!(r, Rewrite::Code("let y = 1;\njax::magic::jaxpr(|| f.call(&nope)).evcxr_display();".into()));
        let cols = cols.unwrap();
        assert_eq!(cols, MagicColumns { line: 2, percent: 2, user_start: 9, code_start: 21 });
        // `nope` is at rewritten column 30 (1-based) and at the user's column 18.
        assert_eq!(&"jax::magic::jaxpr(|| f.call(&nope))"[29..33], "nope");
        assert_eq!(cols.user_column(30), 18);
        assert_eq!(&"  %jaxpr f.call(&nope)"[17..21], "nope");
        // In the generated call: the `%`.
        assert_eq!(cols.user_column(5), 3);
        let (_, cols) = rewrite_mapped("%compile --stage asm g.call(é)");
        let cols = cols.unwrap();
        assert_eq!((cols.user_start, cols.code_start), (21, "jax::magic::compile_stage(\"asm\", || ".len()));
        let (_, cols) = rewrite_mapped("%sharding ys[0];");
        assert_eq!(cols.unwrap().user_column(1 + "jax::magic::sharding(&(".len()), 11);
    }

    #[test]
    fn errors_name_the_problem() {
        let Rewrite::Error(e) = rewrite("%jaxprr f.call(&x)") else { panic!() };
        assert_eq!(
            e,
            "unknown magic `%jaxprr` on line 1; the magics are: %jaxpr, %lower, %compile, %diff-passes, %cost, %time, %timeit, %profile, %memory, %explain, %eqn-count, %precision, %sharding, %mesh, %help"
        );
        let Rewrite::Error(e) = rewrite("%time") else { panic!() };
        assert_eq!(e, "%time needs an expression to run, e.g. `%time f.call(&x)` (line 1)\nusage: %time CALL");
        let Rewrite::Error(e) = rewrite("%explain now") else { panic!() };
        assert_eq!(e, "%explain takes no argument (got `now`) (line 1)\nusage: %explain");
        let Rewrite::Error(e) = rewrite("% ") else { panic!() };
        assert!(e.starts_with("unknown magic `%`"), "{e}");
    }

    #[test]
    fn unbalanced_arguments_are_shown_on_the_users_line_with_a_fix() {
        let Rewrite::Error(e) = rewrite("let x = 1;\n%jaxpr f.call(x") else { panic!() };
        assert_eq!(
            e,
            "%jaxpr's expression is not complete: the `(` at line 2, column 14 is never closed\n \
             --> cell:2:14\n  |\n2 | %jaxpr f.call(x\n  |              ^ unclosed `(`\nfix: `%jaxpr f.call(x)`"
        );
        // Nested: every bracket still open, innermost first.
        let Rewrite::Error(e) = rewrite("%time g.call((&x, &y)") else { panic!() };
        assert!(e.ends_with("fix: `%time g.call((&x, &y))`"), "{e}");
        let Rewrite::Error(e) = rewrite("%timeit f.call(vec![x") else { panic!() };
        assert!(e.contains("the `[` at line 1, column 20 is never closed"), "{e}");
        assert!(e.ends_with("fix: `%timeit f.call(vec![x])`"), "{e}");
        let Rewrite::Error(e) = rewrite("%jaxpr f.call(x))") else { panic!() };
        assert!(e.starts_with("%jaxpr's expression has mismatched brackets: the `)` at line 1, column 17 closes nothing"), "{e}");
        let Rewrite::Error(e) = rewrite("%sharding ys[0)") else { panic!() };
        assert!(e.contains("the `)` at line 1, column 15 does not match the `[` at line 1, column 13"), "{e}");
        let Rewrite::Error(e) = rewrite("%time println!(\"hi)") else { panic!() };
        assert!(e.contains("the string at line 1, column 16 never ends"), "{e}");
        // Multi-line arguments that balance are untouched; unbalanced ones name the line.
        assert_eq!(code("%time {\n  f.call(&x)\n}"), "jax::magic::time(|| {\n  f.call(&x)\n})");
        let Rewrite::Error(e) = rewrite("%time {\n  f.call(&x\n}") else { panic!() };
        assert!(e.contains("the `}` at line 3, column 1 does not match the `(` at line 2, column 9"), "{e}");
    }

    #[test]
    fn non_ascii_does_not_panic() {
        let Rewrite::Error(e) = rewrite("%é x") else { panic!() };
        assert!(e.contains("unknown magic `%`"), "{e}");
        assert_eq!(code("%time \"é\".len()"), "jax::magic::time(|| \"é\".len())");
    }

    #[test]
    fn code_after_a_magic_runs_after_it() {
        fn split(cell: &str) -> Option<(&str, &str)> {
            split_after_magic(cell).map(|at| (&cell[..at], &cell[at..]))
        }
        assert_eq!(split("%jaxpr f.call(&x)\nprintln!(\"done\");"), Some(("%jaxpr f.call(&x)\n", "println!(\"done\");")));
        assert_eq!(split("let y = 1;\n%explain\n\nlet z = 2;\nz"), Some(("let y = 1;\n%explain\n", "\nlet z = 2;\nz")));
        assert_eq!(split("%precision highest\nlet p = 1;"), Some(("%precision highest\n", "let p = 1;")));
        // The argument goes on: open brackets, a method chain, a trailing operator, the
        // expression on the lines after a bare `%time`.
        assert_eq!(split("%time {\n    let y = f.call(&x)?;\n    y\n}\nlet after = 1;"), Some(("%time {\n    let y = f.call(&x)?;\n    y\n}\n", "let after = 1;")));
        assert_eq!(split("%sharding x\n    .clone()"), None);
        assert_eq!(split("%timeit f.call(&x)\n    .unwrap()\nlet k = 1;"), Some(("%timeit f.call(&x)\n    .unwrap()\n", "let k = 1;")));
        assert_eq!(split("%time a +\n    b"), None);
        assert_eq!(split("%time\n{\n  f.call(&x)\n}"), None);
        assert_eq!(split("%time f.call(&x)\n\n"), None);
        assert_eq!(split("%time f.call(&x)\n// a comment"), None);
        assert_eq!(split("let a = 1;"), None);
        // The first part rewrites as a magic of its own.
        assert_eq!(code("%jaxpr f.call(&x)\n"), "jax::magic::jaxpr(|| f.call(&x))");
    }

    #[test]
    fn ipython_timeit_options_are_a_magic_error() {
        let Rewrite::Error(e) = rewrite("%timeit -n 10 f.call(&x)") else { panic!() };
        assert_eq!(
            e,
            "%timeit takes no options (IPython's `-n 10`): it picks the loop count itself (each of its 7 runs takes at least 0.2 s) and waits for every result; write `%timeit f.call(&x)` (line 1)\nusage: %timeit CALL"
        );
        let Rewrite::Error(e) = rewrite("%timeit -r 3 -n 5 f.call(&x)") else { panic!() };
        assert!(e.contains("IPython's `-r 3`"), "{e}");
        let Rewrite::Error(e) = rewrite("%time -q f.call(&x)") else { panic!() };
        assert!(e.starts_with("%time takes no options (IPython's `-q`): it runs CALL once"), "{e}");
        // A unary minus is an expression.
        assert_eq!(code("%time -x.sum()"), "jax::magic::time(|| -x.sum())");
        assert_eq!(code("%timeit -n_steps.call(&x)"), "jax::magic::timeit(|| -n_steps.call(&x))");
    }
}
