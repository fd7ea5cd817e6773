//! Terminal syntax highlighting: Rust input at the prompt, and IR in outputs (jaxprs,
//! MLIR, LLVM IR), through syntect (Sublime Text grammars). Rust uses syntect's bundled
//! grammar; jaxprs and MLIR/LLVM IR use the small grammars in `front/syntaxes/`.
//!
//! Colours are the terminal's own 16 ANSI colours (SGR 31–36, 90, 2), chosen by scope,
//! so the highlighting follows the user's palette on dark and light backgrounds alike.
//! Nothing is coloured when `NO_COLOR` is set or the output is not a terminal (the
//! caller decides).

use std::sync::OnceLock;
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxDefinition, SyntaxReference, SyntaxSet, SyntaxSetBuilder};

/// Which grammar a text is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Jaxpr,
    /// MLIR or LLVM IR.
    Ir,
}

fn rust_set() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn ir_set() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut b = SyntaxSetBuilder::new();
        for text in [include_str!("syntaxes/jaxpr.sublime-syntax"), include_str!("syntaxes/ir.sublime-syntax")] {
            // The grammars are ours and tested; a broken one would only lose its colours.
            if let Ok(def) = SyntaxDefinition::load_from_str(text, true, None) {
                b.add(def);
            }
        }
        b.build()
    })
}

fn grammar(lang: Language) -> Option<(&'static SyntaxSet, &'static SyntaxReference)> {
    match lang {
        Language::Rust => {
            let set = rust_set();
            set.find_syntax_by_extension("rs").map(|s| (set, s))
        }
        Language::Jaxpr => {
            let set = ir_set();
            set.find_syntax_by_scope(Scope::new("source.jaxpr").ok()?).map(|s| (set, s))
        }
        Language::Ir => {
            let set = ir_set();
            set.find_syntax_by_scope(Scope::new("source.ir").ok()?).map(|s| (set, s))
        }
    }
}

/// The SGR code for the innermost scope of `stack` that has a colour, if any.
fn color_of(stack: &ScopeStack) -> Option<&'static str> {
    static RULES: OnceLock<Vec<(Scope, &'static str)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            ("comment", "90"),
            ("string", "32"),
            ("constant.character", "32"),
            ("constant.numeric", "36"),
            ("constant.language", "36"),
            ("constant.other", "36"),
            ("keyword.operator.op", "34"),
            ("keyword.operator", ""),
            ("keyword", "35"),
            ("storage.modifier", "35"),
            ("storage.type", "33"),
            ("entity.name.function", "34"),
            ("support.function", "34"),
            ("support.macro", "34"),
            ("entity.name.type", "33"),
            ("support.type", "33"),
            ("entity.name.label", "33"),
            ("variable.other.ssa", "36"),
            ("variable.parameter", "90"),
        ]
        .into_iter()
        .filter_map(|(s, c)| Scope::new(s).ok().map(|s| (s, c)))
        .collect()
    });
    for scope in stack.as_slice().iter().rev() {
        if let Some((_, code)) = rules.iter().find(|(prefix, _)| prefix.is_prefix_of(*scope)) {
            return if code.is_empty() { None } else { Some(code) };
        }
    }
    None
}

/// `text` with ANSI colours for `lang`. Returns the text unchanged if it cannot be parsed
/// (never fails). Line structure and every character are kept: only escapes are added.
pub fn highlight(text: &str, lang: Language) -> String {
    let Some((set, syntax)) = grammar(lang) else { return text.to_string() };
    let mut state = ParseState::new(syntax);
    let mut stack = ScopeStack::new();
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.split_inclusive('\n') {
        let Ok(ops) = state.parse_line(line, set) else { return text.to_string() };
        let mut pos = 0;
        let emit = |out: &mut String, piece: &str, stack: &ScopeStack| {
            if piece.is_empty() {
                return;
            }
            match color_of(stack) {
                Some(code) => {
                    // Keep the newline outside the colour so the terminal's line stays clean.
                    let (body, nl) = piece.strip_suffix('\n').map_or((piece, ""), |b| (b, "\n"));
                    out.push_str(&format!("\x1b[{code}m{body}\x1b[0m{nl}"));
                }
                None => out.push_str(piece),
            }
        };
        for (at, op) in ops {
            let at = at.min(line.len());
            emit(&mut out, &line[pos..at], &stack);
            pos = at;
            if stack.apply(&op).is_err() {
                return text.to_string();
            }
        }
        emit(&mut out, &line[pos..], &stack);
    }
    out
}

/// The language of a cell's displayed text, if it is IR: a jaxpr (`{ lambda`, or a
/// `let name = {` outlined sub-jaxpr first), MLIR (`module`, `#loc`, `func.func`,
/// `#map`), or LLVM IR (`; ModuleID`). Other text is not highlighted.
pub fn detect_ir(text: &str) -> Option<Language> {
    let first = text.lines().map(str::trim_start).find(|l| !l.is_empty())?;
    if first.starts_with("{ lambda") || (first.starts_with("let ") && text.contains("{ lambda")) {
        Some(Language::Jaxpr)
    } else if first.starts_with("module") || first.starts_with("#loc") || first.starts_with("func.func") || first.starts_with("#map") || first.starts_with("; ModuleID") {
        Some(Language::Ir)
    } else {
        None
    }
}

/// Removes ANSI SGR escapes (what [`highlight`] adds).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (text, SGR code) runs of a highlighted string; adjacent coloured pieces of the
    /// same code (a grammar may split `3.0` into `3.` and `0`) are joined.
    fn runs(s: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut adjacent = false;
        for part in s.split("\x1b[").skip(1) {
            let (code, rest) = part.split_once('m').unwrap();
            if code == "0" {
                // Text after a reset is uncoloured; only an empty one keeps runs adjacent.
                adjacent = rest.is_empty();
                continue;
            }
            match v.last_mut() {
                Some((text, c)) if adjacent && c == code => text.push_str(rest),
                _ => v.push((rest.to_string(), code.to_string())),
            }
            adjacent = false;
        }
        v
    }

    #[test]
    fn rust_keywords_strings_numbers_and_comments() {
        let src = "let x = jnp::arange(3.0); // three\nprintln!(\"hi\");\n";
        let h = highlight(src, Language::Rust);
        assert_eq!(strip_ansi(&h), src, "highlighting must keep every character");
        let r = runs(&h);
        let code = |t: &str| r.iter().find(|(x, _)| x == t).map(|(_, c)| c.clone());
        assert_eq!(code("let").as_deref(), Some("33"), "{r:?}");
        assert_eq!(code("3.0").as_deref(), Some("36"), "{r:?}");
        assert!(r.iter().any(|(t, c)| t.contains("// three") && c == "90"), "{r:?}");
        assert!(r.iter().any(|(t, c)| t == "\"hi\"" && c == "32"), "{r:?}");
        assert!(r.iter().any(|(t, c)| t == "println!" && c == "34"), "{r:?}");
    }

    #[test]
    fn jaxpr_types_primitives_and_literals() {
        let src = "{ lambda ; a:f32[8]. let\n    b:f32[8] = sin a\n    c:f32[8] = mul b 2.0:f32[]\n  in (c,) }";
        assert_eq!(detect_ir(src), Some(Language::Jaxpr));
        let h = highlight(src, Language::Jaxpr);
        assert_eq!(strip_ansi(&h), src);
        let r = runs(&h);
        assert!(r.contains(&("lambda".into(), "35".into())), "{r:?}");
        assert!(r.contains(&("sin".into(), "34".into())), "{r:?}");
        assert!(r.contains(&("f32[8]".into(), "33".into())), "{r:?}");
        assert!(r.contains(&("f32[]".into(), "33".into())), "{r:?}");
        assert!(r.contains(&("2.0".into(), "36".into())), "{r:?}");
    }

    #[test]
    fn mlir_ssa_values_ops_and_types() {
        let src = "module @jit_f {\n  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {\n    %0 = math.sin %arg0 : tensor<8xf32>\n    return %0 : tensor<8xf32>\n  }\n}\n";
        assert_eq!(detect_ir(src), Some(Language::Ir));
        let h = highlight(src, Language::Ir);
        assert_eq!(strip_ansi(&h), src);
        let r = runs(&h);
        assert!(r.contains(&("%arg0".into(), "36".into())), "{r:?}");
        assert!(r.contains(&("@main".into(), "34".into())), "{r:?}");
        assert!(r.contains(&("math.sin".into(), "34".into())), "{r:?}");
        assert!(r.contains(&("tensor<8xf32>".into(), "33".into())), "{r:?}");
    }

    #[test]
    fn other_text_is_not_ir() {
        assert_eq!(detect_ir("Array([1., 2.], dtype=float32)"), None);
        assert_eq!(detect_ir(""), None);
        assert_eq!(detect_ir("let x = 1;"), None);
    }

    #[test]
    fn grammars_load() {
        assert!(grammar(Language::Rust).is_some());
        assert!(grammar(Language::Jaxpr).is_some());
        assert!(grammar(Language::Ir).is_some());
    }
}
