//! The variables a cell binds with its own top-level `let` statements, and the note shown
//! when a failing cell does not keep them.
//!
//! evcxr compiles a cell into one function and stores the cell's new variables at its
//! end: a cell that stops early (a panic, or `?` on an `Err`) keeps none of them, unlike
//! Python, where every statement that ran has bound its names. The session cannot store
//! them one by one (evcxr decides, per cell, which variables exist and of which type), so
//! it says which were not kept and how to keep them.

use ra_ap_syntax::ast::{self, AstNode, HasArgList, HasName};
use ra_ap_syntax::{Edition, SourceFile};

/// One name bound by a top-level `let` of a cell, with the statement's line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The variable's name (`x` of `let (x, mut y) = ..`).
    pub name: String,
    /// The line of the cell where its `let` statement starts.
    pub line: usize,
}

/// The names the cell's top-level `let` statements bind, in order, as evcxr parses a cell
/// (its statements inside a function body). `_` and names inside nested blocks are not
/// bindings of the cell; an unparsable tail binds nothing.
pub fn cell_bindings(code: &str) -> Vec<Binding> {
    const PRELUDE: &str = "fn f(){";
    let parsed = SourceFile::parse(&format!("{PRELUDE}{code}\n}}"), Edition::CURRENT);
    let Some(list) = parsed
        .tree()
        .syntax()
        .children()
        .find_map(ast::Fn::cast)
        .and_then(|f| f.body())
        .and_then(|b| b.stmt_list())
    else {
        return Vec::new();
    };
    let mut out: Vec<Binding> = Vec::new();
    for stmt in list.statements() {
        let ast::Stmt::LetStmt(stmt) = stmt else { continue };
        let Some(pat) = stmt.pat() else { continue };
        let start = usize::from(stmt.syntax().text_range().start()).saturating_sub(PRELUDE.len()).min(code.len());
        let line = code[..start].matches('\n').count() + 1;
        for ident in pat.syntax().descendants().filter_map(ast::IdentPat::cast) {
            let Some(name) = ident.name() else { continue };
            let name = name.text().to_string();
            if name != "_" {
                // A later `let` of the same name shadows the earlier: keep the last line.
                out.retain(|b| b.name != name);
                out.push(Binding { name, line });
            }
        }
    }
    out
}

/// How the session keeps the value an earlier cell gave a variable that the cell binds
/// again (the engine's `jax::interactive::rebound`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepBy {
    /// The cell does not use the name before binding it again: the value is moved aside
    /// (any type, no copy).
    Move,
    /// The cell reads the earlier value first: a clone is kept when its type is `Clone`
    /// (an `Array` clone shares its buffers), nothing otherwise.
    Clone,
}

/// The variables of `earlier` (the session's names) that the cell binds again with a
/// top-level `let`, in order, each with how to keep its earlier value: [`KeepBy::Move`]
/// when the name appears nowhere in the cell's text before the end of that `let` (the
/// binding itself aside; a word match, so a mention in a string, comment or macro counts,
/// which errs on the side of a clone), else [`KeepBy::Clone`].
pub fn rebound(code: &str, earlier: &[&str]) -> Vec<(String, KeepBy)> {
    const PRELUDE: &str = "fn f(){";
    let parsed = SourceFile::parse(&format!("{PRELUDE}{code}\n}}"), Edition::CURRENT);
    let Some(list) = parsed
        .tree()
        .syntax()
        .children()
        .find_map(ast::Fn::cast)
        .and_then(|f| f.body())
        .and_then(|b| b.stmt_list())
    else {
        return Vec::new();
    };
    let offset = |at: ra_ap_syntax::TextSize| usize::from(at).saturating_sub(PRELUDE.len()).min(code.len());
    let mut out: Vec<(String, KeepBy)> = Vec::new();
    for stmt in list.statements() {
        let ast::Stmt::LetStmt(stmt) = stmt else { continue };
        let Some(pat) = stmt.pat() else { continue };
        let end = offset(stmt.syntax().text_range().end());
        for ident in pat.syntax().descendants().filter_map(ast::IdentPat::cast) {
            let Some(name) = ident.name() else { continue };
            let name = name.text().to_string();
            if !earlier.contains(&name.as_str()) || out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            let binding = offset(ident.syntax().text_range().start());
            let binding = binding + code[binding..end].find(name.as_str()).unwrap_or(0);
            let used_before = word_positions(&code[..end], &name).any(|at| at != binding);
            out.push((name, if used_before { KeepBy::Clone } else { KeepBy::Move }));
        }
    }
    out
}

/// Byte offsets in `text` where `word` occurs as a whole identifier.
fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).map(|(at, _)| at).filter(move |&at| {
        !ident(text[..at].chars().next_back()) && !ident(text[at + word.len()..].chars().next())
    })
}

/// The statements, on one line, that hand each earlier value of `plan` (from
/// [`rebound`]) to the engine at the cell's start.
pub fn keep_code(plan: &[(String, KeepBy)]) -> String {
    const AT: &str = "jax::interactive::rebound";
    plan.iter()
        .map(|(name, by)| match by {
            KeepBy::Move => format!(" {AT}::keep_rebound(\"{name}\", {name});"),
            KeepBy::Clone => format!(
                " {{ use {AT}::{{KeepByClone as _, KeepNothing as _}}; (&{AT}::Rebound(&{name})).keep(\"{name}\"); }}"
            ),
        })
        .collect()
}

/// The cell that binds each of `vars` (`(name, type)`, as evcxr names the type) again
/// from the value the engine kept.
pub fn restore_code(vars: &[(String, String)]) -> String {
    vars.iter()
        .map(|(name, ty)| format!("let mut {name}: {ty} = jax::interactive::rebound::take_kept::<{ty}>(\"{name}\");\n"))
        .collect()
}

/// The note for a cell that failed part-way: which of its own variables were not kept
/// (`lost`: bound by the cell, absent now), which of those lost the value an earlier
/// cell gave them as well (`gone`, a subset of `lost`), and which keep the value they had
/// before the cell (`stale`: bound by the cell, defined by an earlier cell, kept or given
/// back by the session), why, and the fix. `None` when `lost` and `stale` are empty.
pub fn not_kept_note(lost: &[Binding], stale: &[Binding], gone: &[Binding]) -> Option<String> {
    if lost.is_empty() && stale.is_empty() {
        return None;
    }
    let names = |bs: &[Binding]| bs.iter().map(|b| format!("`{}` (line {})", b.name, b.line)).collect::<Vec<_>>().join(", ");
    let mut text = String::new();
    if !lost.is_empty() {
        let (s, were) = if lost.len() == 1 { ("", "was") } else { ("s", "were") };
        text.push_str(&format!("This cell's variable{s} {} {were} not kept", names(lost)));
        if !gone.is_empty() {
            let (they, its) = if gone.len() == 1 { ("it", "its") } else { ("they", "their") };
            text.push_str(&format!(
                ", and {} lost {its} value from before the cell too (the cell read {they} before binding {they} again, \
                 and only a type that is `Clone` can be kept then)",
                names(gone)
            ));
        }
    }
    if !stale.is_empty() {
        let (s, keep) = if stale.len() == 1 { ("", "keeps its") } else { ("s", "keep their") };
        if text.is_empty() {
            text.push_str(&format!("This cell's variable{s} {} {keep} value from before the cell", names(stale)));
        } else {
            text.push_str(&format!("; {} {keep} value from before the cell", names(stale)));
        }
    }
    text.push_str(
        ": the cell stopped early, and a cell's variables are stored only when the whole cell \
         succeeds (each cell is compiled as one function). Fix: put the failing statement in \
         its own cell, so the statements before it keep what they bound; then run it again.",
    );
    Some(text)
}

/// The note for variables an earlier cell defined that a successful cell moved: evcxr
/// drops a moved variable from the session without a word (`let y = f(x);` with
/// `fn f(a: Array)` takes `x`), so the session names each, with the first line of the
/// cell that uses it, and the fix. `before`/`after`: the session's `(name, type)` lists
/// around the cell. `None` when nothing went missing or the cell ran `:clear`.
pub fn moved_note(before: &[(String, String)], after: &[(String, String)], code: &str) -> Option<String> {
    if code.lines().any(|l| l.trim_start().starts_with(":clear")) {
        return None;
    }
    let gone: Vec<&str> = before
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !after.iter().any(|(m, _)| m == n))
        .collect();
    if gone.is_empty() {
        return None;
    }
    let parsed = SourceFile::parse(&format!("fn f(){{{code}\n}}"), Edition::CURRENT);
    // `drop(x)` (or `std::mem::drop(x)`) ends `x` on purpose: nothing to tell.
    let dropped = |name: &str| {
        parsed.tree().syntax().descendants().filter_map(ast::CallExpr::cast).any(|call| {
            let callee = call.expr().map(|e| e.syntax().text().to_string()).unwrap_or_default();
            let args: Vec<String> = call.arg_list().map(|l| l.args().map(|a| a.syntax().text().to_string()).collect()).unwrap_or_default();
            matches!(callee.as_str(), "drop" | "mem::drop" | "std::mem::drop") && args.len() == 1 && args[0].trim() == name
        })
    };
    let first_use = |name: &str| -> Option<usize> {
        let at = parsed
            .tree()
            .syntax()
            .descendants()
            .filter_map(ast::NameRef::cast)
            .find(|r| r.text() == name)
            .map(|r| usize::from(r.syntax().text_range().start()).saturating_sub("fn f(){".len()).min(code.len()))?;
        Some(code[..at].matches('\n').count() + 1)
    };
    let lines: Vec<String> = gone
        .iter()
        .filter(|n| !dropped(n))
        .map(|n| {
            let at = first_use(n).map(|l| format!(" (line {l})")).unwrap_or_default();
            format!(
                "note: `{n}` was moved by this cell{at} and is no longer defined; to keep it, \
                 pass `&{n}` or `{n}.clone()` instead"
            )
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(code: &str) -> Vec<(String, usize)> {
        cell_bindings(code).into_iter().map(|b| (b.name, b.line)).collect()
    }

    #[test]
    fn top_level_lets_and_their_lines() {
        let code = "let keep1 = 1;\nlet mut keep2 = jnp::arange(2.0);\nlet (a, (b, _)) = (1, (2, 3));\n\
                    { let inner = 5; }\nlet f = |x: i32| { let y = x; y };\nlet _ = 7;\nlet bad = x + y;";
        assert_eq!(
            names(code),
            vec![
                ("keep1".to_string(), 1),
                ("keep2".into(), 2),
                ("a".into(), 3),
                ("b".into(), 3),
                ("f".into(), 5),
                ("bad".into(), 7)
            ]
        );
        // Two statements on one line; a shadowed name counts once, at its last `let`.
        assert_eq!(names("let x = 1; let y = 2; let x = 3;"), vec![("y".to_string(), 1), ("x".into(), 1)]);
        assert_eq!(names("f.call(&x)"), vec![]);
        assert_eq!(names("%jaxpr f.call(x"), vec![]);
        assert_eq!(names(""), vec![]);
    }

    #[test]
    fn the_note_names_the_variables_and_the_fix() {
        let lost = cell_bindings("let keep1 = 1;\nlet keep2 = 2;");
        let note = not_kept_note(&lost, &[], &[]).unwrap();
        assert!(note.starts_with("This cell's variables `keep1` (line 1), `keep2` (line 2) were not kept: the cell stopped early"), "{note}");
        assert!(note.ends_with("Fix: put the failing statement in its own cell, so the statements before it keep what they bound; then run it again."), "{note}");
        let stale = cell_bindings("let x = 1;");
        let note = not_kept_note(&lost[..1], &stale, &[]).unwrap();
        assert!(note.starts_with("This cell's variable `keep1` (line 1) was not kept; `x` (line 1) keeps its value from before the cell:"), "{note}");
        assert_eq!(not_kept_note(&[], &[], &[]), None);
        let lost = cell_bindings("let g = f(&g);\nlet bad = 1;");
        let note = not_kept_note(&lost, &[], &lost[..1]).unwrap();
        assert!(
            note.starts_with("This cell's variables `g` (line 1), `bad` (line 2) were not kept, and `g` (line 1) lost its value from before the cell too (the cell read it before binding it again, and only a type that is `Clone` can be kept then): the cell stopped early"),
            "{note}"
        );
    }

    #[test]
    fn rebound_names_are_moved_aside_unless_the_cell_reads_them_first() {
        let earlier = ["x", "y", "g", "w", "unused"];
        let plan = rebound(
            "let n = 1;\nlet x = jnp::arange(3.0);\nlet mut y = y * 2.0;\nprintln!(\"{g}\");\nlet g = 5;\nlet x = 2;\n\
             { let w = 1; }\nlet (w, xs) = (w_total, 3);",
            &earlier,
        );
        assert_eq!(
            plan,
            vec![
                ("x".to_string(), KeepBy::Move),  // first bound before any use; the later `let x` counts once
                ("y".into(), KeepBy::Clone),      // read in its own initializer
                ("g".into(), KeepBy::Clone),      // read in a format string before
                ("w".into(), KeepBy::Clone),      // a nested block's `w` is a mention too (errs towards a clone)
            ]
        );
        assert_eq!(rebound("let xs = x;", &["x"]), vec![]); // `x` is read, not bound again
        assert_eq!(rebound("let x_1 = 1; let x = 2;", &["x"]), vec![("x".to_string(), KeepBy::Move)]);
        let code = keep_code(&plan[..2]);
        assert_eq!(
            code,
            " jax::interactive::rebound::keep_rebound(\"x\", x); { use jax::interactive::rebound::{KeepByClone as _, KeepNothing as _}; \
             (&jax::interactive::rebound::Rebound(&y)).keep(\"y\"); }"
        );
        assert!(!code.contains('\n'));
        assert_eq!(
            restore_code(&[("x".into(), "jax::Array".into())]),
            "let mut x: jax::Array = jax::interactive::rebound::take_kept::<jax::Array>(\"x\");\n"
        );
    }

    #[test]
    fn moved_variables_are_named_with_the_line_that_took_them() {
        let v = |names: &[&str]| names.iter().map(|n| (n.to_string(), "Array".to_string())).collect::<Vec<_>>();
        let note = moved_note(&v(&["w", "x", "y"]), &v(&["w", "y"]), "let n = 1;\nlet z = consume(x);").unwrap();
        assert_eq!(
            note,
            "note: `x` was moved by this cell (line 2) and is no longer defined; to keep it, pass `&x` or `x.clone()` instead"
        );
        assert_eq!(moved_note(&v(&["x"]), &v(&["x", "z"]), "let z = x.clone();"), None);
        assert_eq!(moved_note(&v(&["x"]), &v(&[]), ":clear"), None);
        // An explicit drop is on purpose: no note for it, still one for another moved name.
        assert_eq!(moved_note(&v(&["x"]), &v(&[]), "drop(x);\nlet n = 1;"), None);
        assert_eq!(moved_note(&v(&["x"]), &v(&[]), "std::mem::drop( x );"), None);
        let note = moved_note(&v(&["x", "y"]), &v(&[]), "drop(y);\nlet z = take(x);").unwrap();
        assert!(note.starts_with("note: `x` was moved by this cell (line 2)") && !note.contains("`y`"), "{note}");
    }
}
