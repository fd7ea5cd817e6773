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
    MagicSpec { name: "jaxpr", function: "jaxpr", arg: MagicArg::Call, summary: "show the jaxpr that CALL traces to" },
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
pub fn help_text() -> String {
    let mut text = String::from("Magics (one per cell, at its start; CALL may span lines):\n");
    for m in MAGICS {
        let usage = match m.arg {
            MagicArg::Call => format!("%{} CALL", m.name),
            MagicArg::StageCall => format!("%{} [--stage S] CALL", m.name),
            MagicArg::WordOrCompare => format!("%{} [V|compare CALL]", m.name),
            MagicArg::None => format!("%{}", m.name),
            MagicArg::Ref => format!("%{} X", m.name),
            MagicArg::OptRef => format!("%{} [M]", m.name),
        };
        text.push_str(&format!("  {usage:<16} {}\n", m.summary));
    }
    text.push_str(
        "CALL is a Rust expression, e.g. `%timeit f.call(&x)`.\n\
         evcxr commands start with `:` (`:vars`, `:dep`, `:help`).\n",
    );
    text
}

/// Finds a magic at the start of `cell` (after blank lines) and rewrites it.
///
/// A `%%name` spelling is accepted as `%name`. Lines before the magic must be blank;
/// the argument is everything after the name, up to the end of the cell.
pub fn rewrite(cell: &str) -> Rewrite {
    // Find the first non-blank line; it must start with '%'.
    let mut offset = 0;
    let mut line_start = None;
    for line in cell.split_inclusive('\n') {
        if !line.trim().is_empty() {
            line_start = Some(offset);
            break;
        }
        offset += line.len();
    }
    let Some(start) = line_start else {
        return Rewrite::NotMagic;
    };
    let rest = &cell[start..];
    let indent = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let rest = &rest[indent..];
    let Some(after_pct) = rest.strip_prefix('%') else {
        return Rewrite::NotMagic;
    };
    let after_pct = after_pct.strip_prefix('%').unwrap_or(after_pct);
    let name_len = after_pct
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(after_pct.len());
    let name = &after_pct[..name_len];
    let arg = &after_pct[name_len..];
    let Some(spec) = MAGICS.iter().find(|m| m.name == name) else {
        let shown = if name.is_empty() { "%".to_string() } else { format!("%{name}") };
        return Rewrite::Error(format!(
            "unknown magic `{shown}`; the magics are: {}",
            magic_names()
        ));
    };
    // Keep everything before the magic (blank lines) so line numbers are unchanged.
    let prefix = &cell[..start];
    match spec.arg {
        MagicArg::WordOrCompare => {
            let a = arg.trim_start_matches([' ', '\t']);
            if let Some(call) = a.strip_prefix("compare").filter(|r| r.is_empty() || r.starts_with(char::is_whitespace)) {
                let body = call.trim_end();
                let body = body.strip_suffix(';').unwrap_or(body).trim_end();
                if body.trim().is_empty() {
                    return Rewrite::Error(format!(
                        "%{} compare needs an expression to run, e.g. `%{} compare f.call(&x)`",
                        spec.name, spec.name
                    ));
                }
                let body = body.strip_prefix([' ', '\t']).unwrap_or(body);
                return Rewrite::Code(format!("{prefix}jax::magic::{}_compare(|| {body})", spec.function));
            }
            let word = a.trim();
            if !word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Rewrite::Error(format!(
                    "%{} takes a precision name (highest, high, default, BF16_BF16_F32, none, ...) or `compare CALL`, got `{word}`",
                    spec.name
                ));
            }
            Rewrite::Code(format!("{prefix}jax::magic::{}(\"{word}\")", spec.function))
        }
        MagicArg::Ref | MagicArg::OptRef => {
            let body = arg.trim();
            let body = body.strip_suffix(';').unwrap_or(body).trim();
            match (body.is_empty(), spec.arg) {
                (true, MagicArg::OptRef) => Rewrite::Code(format!("{prefix}jax::magic::{}(None)", spec.function)),
                (true, _) => Rewrite::Error(format!("%{} needs an array, e.g. `%{} x`", spec.name, spec.name)),
                (false, MagicArg::OptRef) => Rewrite::Code(format!("{prefix}jax::magic::{}(Some(&({body})))", spec.function)),
                (false, _) => Rewrite::Code(format!("{prefix}jax::magic::{}(&({body}))", spec.function)),
            }
        }
        MagicArg::None => {
            if !arg.trim().is_empty() {
                return Rewrite::Error(format!(
                    "%{} takes no argument (got `{}`)",
                    spec.name,
                    arg.trim()
                ));
            }
            Rewrite::Code(format!("{prefix}jax::magic::{}()", spec.function))
        }
        MagicArg::Call | MagicArg::StageCall => {
            // `--stage NAME` (same line) selects `<function>_stage("NAME", ..)`.
            let (function, arg) = match arg.trim_start_matches([' ', '\t']).strip_prefix("--stage") {
                Some(rest) if spec.arg == MagicArg::StageCall => {
                    let rest = rest.trim_start_matches([' ', '\t', '=']);
                    let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
                    let stage = &rest[..end];
                    if stage.is_empty() || !stage.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Rewrite::Error(format!(
                            "%{} --stage needs a stage name (jaxpr, lowered, opt, llvm, asm), e.g. `%{} --stage asm f.call(&x)`",
                            spec.name, spec.name
                        ));
                    }
                    (format!("{}_stage(\"{stage}\", ", spec.function), &rest[end..])
                }
                _ => (format!("{}(", spec.function), arg),
            };
            // The argument keeps its own lines; a trailing `;` would make it a statement.
            let body = arg.trim_end();
            let body = body.strip_suffix(';').unwrap_or(body).trim_end();
            if body.trim().is_empty() {
                return Rewrite::Error(format!(
                    "%{} needs an expression to run, e.g. `%{} f.call(&x)`",
                    spec.name, spec.name
                ));
            }
            let body = body.strip_prefix([' ', '\t']).unwrap_or(body);
            Rewrite::Code(format!("{prefix}jax::magic::{function}|| {body})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(cell: &str) -> String {
        match rewrite(cell) {
            Rewrite::Code(c) => c,
            other => panic!("expected code for {cell:?}, got {other:?}"),
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
        assert_eq!(e, "%compile needs an expression to run, e.g. `%compile f.call(&x)`");
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
        assert_eq!(rewrite("x\n%time y"), Rewrite::NotMagic);
    }

    #[test]
    fn errors_name_the_problem() {
        let Rewrite::Error(e) = rewrite("%jaxprr f.call(&x)") else { panic!() };
        assert_eq!(
            e,
            "unknown magic `%jaxprr`; the magics are: %jaxpr, %lower, %compile, %diff-passes, %cost, %time, %timeit, %profile, %memory, %explain, %eqn-count, %precision, %sharding, %mesh, %help"
        );
        let Rewrite::Error(e) = rewrite("%time") else { panic!() };
        assert_eq!(e, "%time needs an expression to run, e.g. `%time f.call(&x)`");
        let Rewrite::Error(e) = rewrite("%explain now") else { panic!() };
        assert_eq!(e, "%explain takes no argument (got `now`)");
        let Rewrite::Error(e) = rewrite("% ") else { panic!() };
        assert!(e.starts_with("unknown magic `%`"), "{e}");
    }

    #[test]
    fn non_ascii_does_not_panic() {
        let Rewrite::Error(e) = rewrite("%é x") else { panic!() };
        assert!(e.contains("unknown magic `%`"), "{e}");
        assert_eq!(code("%time \"é\".len()"), "jax::magic::time(|| \"é\".len())");
    }
}
