//! Cell locations: `#[track_caller]` locations in evcxr's generated crates, shown as the
//! user's cell lines (`cell 3, line 2`).
//!
//! evcxr wraps every cell into a generated crate whose source is always `src/lib.rs`
//! (statements inside a function, items such as `fn` definitions of this and earlier
//! cells at the top level), compiled into a new shared object. A location the engine
//! records in such a crate says `src/lib.rs:LINE:COL`, which means nothing to the user.
//!
//! The REPL session prepends one call to every cell it runs: [`enter_cell`]`(N, LIB_RS,
//! CELL)`, with the cell's number (the `In [N]` the front end shows), the path of the
//! generated `lib.rs` and the cell's text. The call reads the generated source once and
//! matches its lines to the lines of the cells registered so far (the same text, the
//! longest run of equal neighbouring lines wins, then the newest cell), giving a table
//! from generated lines to `(cell, line)` for this crate. As every crate's source is
//! called `src/lib.rs`, the crate a location belongs to is found from where its file-name
//! string lives: the shared object containing that address (`dladdr`). A function defined
//! in cell 1 and traced in cell 3 is therefore still shown at its line in cell 1.
//!
//! Outside the REPL (tests, binaries) nothing is registered and locations stay
//! `file:line:column`.

use crate::ir::SourceInfo;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The file name evcxr's generated crates give to their source.
const GENERATED_FILE: &str = "src/lib.rs";
/// The `file` of a [`SourceInfo`] in a cell is this prefix and the cell's number.
pub const CELL_PREFIX: &str = "cell ";

/// One generated line's place in a cell: cell number, line (1-based), and the column
/// shift (the difference in leading whitespace between the cell's line and the copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CellLine {
    cell: u64,
    line: u32,
    shift: i64,
}

#[derive(Default)]
struct Registry {
    /// Registered cells in order: number and lines.
    cells: Vec<(u64, Vec<String>)>,
    /// For each generated crate (the load address of its shared object): generated line
    /// (1-based) to cell line.
    crates: HashMap<usize, HashMap<u32, CellLine>>,
}

static ANY: AtomicBool = AtomicBool::new(false);

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Registry::default()))
}

/// Registers the cell about to run: its number `cell` (as the front end shows it, `In
/// [N]`), the path of the generated crate's source `lib_rs`, and the cell's text `code`.
/// The REPL session prepends this call to each cell; it is not meant to be called by hand.
/// Never fails: when the source cannot be read or the crate not identified, locations in
/// this cell stay `src/lib.rs:LINE:COL`. A pending interrupt (one that came before the
/// cell's code started) is dropped, and so are the earlier values kept for the previous
/// cell (`interactive::rebound`): that cell succeeded, or the session took them back.
#[track_caller]
pub fn enter_cell(cell: u64, lib_rs: &str, code: &str) {
    // An interrupt that arrived before this cell's code started (Ctrl-C while an earlier
    // cell was being built: "nothing ran") belongs to no computation of this cell: without
    // this, this cell's first wait took it and failed with KeyboardInterrupt.
    let _ = crate::runtime::interrupt::take_if_set();
    // The previous cell succeeded or was already given back what it kept.
    crate::interactive::rebound::clear_kept();
    let loc = Location::caller();
    let Some(base) = object_base(loc.file().as_ptr()) else { return };
    let generated = std::fs::read_to_string(lib_rs).unwrap_or_default();
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    // Kept even when the number repeats (a silent Jupyter request reuses the count): an
    // earlier cell's functions still map to its text.
    r.cells.push((cell, code.lines().map(str::to_string).collect()));
    let table = match_lines(&generated, &r.cells);
    r.crates.insert(base, table);
    ANY.store(true, Ordering::Release);
}

/// The text of line `line` (1-based) of registered cell `cell`, if known.
pub fn cell_source_line(cell: u64, line: u32) -> Option<String> {
    let r = registry().lock().unwrap_or_else(|e| e.into_inner());
    let (_, lines) = r.cells.iter().rev().find(|(n, _)| *n == cell)?;
    lines.get((line as usize).checked_sub(1)?).cloned()
}

/// The cell line of a location in a registered generated crate, as source info with
/// `file` = `cell N`; `None` for any other location.
pub fn map_location(loc: &Location<'_>) -> Option<SourceInfo> {
    if !ANY.load(Ordering::Acquire) || !loc.file().ends_with(GENERATED_FILE) {
        return None;
    }
    let base = object_base(loc.file().as_ptr())?;
    let r = registry().lock().unwrap_or_else(|e| e.into_inner());
    let at = r.crates.get(&base)?.get(&loc.line())?;
    let column = (loc.column() as i64 + at.shift).max(1) as u32;
    Some(SourceInfo { file: format!("{CELL_PREFIX}{}", at.cell), line: at.line, column })
}

/// Whether a trimmed line is worth matching: blank lines and lone brackets are not (they
/// stage no equations and match anywhere).
fn distinctive(t: &str) -> bool {
    t.chars().any(|c| c.is_alphanumeric())
}

/// Matches every distinctive generated line to the cell line with the same text and the
/// longest run of equal neighbouring lines (up to 64 each way); ties go to the newest cell.
fn match_lines(generated: &str, cells: &[(u64, Vec<String>)]) -> HashMap<u32, CellLine> {
    let generated_lines: Vec<&str> = generated.lines().collect();
    let mut index: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (ci, (_, lines)) in cells.iter().enumerate() {
        for (li, l) in lines.iter().enumerate() {
            let t = l.trim();
            if distinctive(t) {
                index.entry(t).or_default().push((ci, li));
            }
        }
    }
    let mut table: HashMap<u32, CellLine> = HashMap::new();
    for (g, text) in generated_lines.iter().enumerate() {
        let t = text.trim();
        let Some(cands) = index.get(t) else {
            // Not a whole cell line: a statement that shares its line with others
            // (`let f = jit(..); f.call(&x)`), which evcxr puts on a line of its own.
            if let Some(at) = statement_in_line(t, cells) {
                let lead = (text.len() - text.trim_start().len()) as i64;
                table.insert(g as u32 + 1, CellLine { shift: at.shift - lead, ..at });
            }
            continue;
        };
        let run = |ci: usize, li: usize| -> usize {
            let lines = &cells[ci].1;
            let mut n = 0;
            for k in 1..=64usize {
                let (Some(gl), Some(cl)) = (g.checked_sub(k).and_then(|i| generated_lines.get(i)), li.checked_sub(k).and_then(|i| lines.get(i)))
                else {
                    break;
                };
                if gl.trim() != cl.trim() {
                    break;
                }
                n += 1;
            }
            for k in 1..=64usize {
                let (Some(gl), Some(cl)) = (generated_lines.get(g + k), lines.get(li + k)) else { break };
                if gl.trim() != cl.trim() {
                    break;
                }
                n += 1;
            }
            n
        };
        let best = cands.iter().max_by_key(|&&(ci, li)| (run(ci, li), ci));
        if let Some(&(ci, li)) = best {
            let cell_text = &cells[ci].1[li];
            let lead = |s: &str| (s.len() - s.trim_start().len()) as i64;
            table.insert(
                g as u32 + 1,
                CellLine { cell: cells[ci].0, line: li as u32 + 1, shift: lead(cell_text) - lead(text) },
            );
        }
    }
    // evcxr wraps a cell's final expression in parentheses on lines of their own, `(` /
    // EXPR / `).evcxr_display();` (or `evcxr_send_text_plain(&format!("{:?}",&(` / EXPR /
    // `)));`), and rustc gives an operator in EXPR (`&x + &w`) the span of the parenthesised
    // expression, which starts at the `(`. An unmatched line ending in `(` before a matched
    // line therefore maps to that line, its `(` to where the expression starts.
    for (g, text) in generated_lines.iter().enumerate() {
        let line = g as u32 + 1;
        if table.contains_key(&line) || !text.trim_end().ends_with('(') {
            continue;
        }
        let (Some(next), Some(next_text)) = (table.get(&(line + 1)).copied(), generated_lines.get(g + 1)) else { continue };
        let paren = text.trim_end().chars().count() as i64 - 1;
        let next_lead = (next_text.len() - next_text.trim_start().len()) as i64;
        table.insert(line, CellLine { shift: next.shift + next_lead - paren, ..next });
    }
    table
}

/// A cell line holding the trimmed generated line `t` as a whole statement (or item, or
/// the first or last line of one) between others: it starts the line or follows a `;`,
/// `{` or `}`, and ends the line or is followed by whitespace. Searched newest cell first;
/// `shift` is the (character) column where `t` starts in the cell line, minus one.
/// Lines with fewer than two alphanumerics are not searched (`r`, `x?` would match
/// anywhere).
fn statement_in_line(t: &str, cells: &[(u64, Vec<String>)]) -> Option<CellLine> {
    if t.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
        return None;
    }
    for (cell, lines) in cells.iter().rev() {
        for (li, l) in lines.iter().enumerate() {
            if l.trim() == t {
                continue;
            }
            for (pos, _) in l.match_indices(t) {
                let before = l[..pos].trim_end();
                let after = &l[pos + t.len()..];
                let starts = before.is_empty() || before.ends_with([';', '{', '}']);
                let ends = after.is_empty() || after.starts_with(char::is_whitespace);
                if starts && ends {
                    let column = l[..pos].chars().count() as i64;
                    return Some(CellLine { cell: *cell, line: li as u32 + 1, shift: column });
                }
            }
        }
    }
    None
}

/// The load address of the shared object (or executable) containing `addr`.
#[cfg(unix)]
fn object_base(addr: *const u8) -> Option<usize> {
    use std::ffi::{c_char, c_int, c_void};
    #[repr(C)]
    struct DlInfo {
        dli_fname: *const c_char,
        dli_fbase: *mut c_void,
        dli_sname: *const c_char,
        dli_saddr: *mut c_void,
    }
    unsafe extern "C" {
        fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    }
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    let found = unsafe { dladdr(addr.cast(), &mut info) };
    (found != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

#[cfg(not(unix))]
fn object_base(_addr: *const u8) -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_lines_map_to_the_cell_with_the_longest_equal_run() {
        let cells = vec![
            (1, vec!["fn f(x: &Array) -> Result<Array> {".to_string(), "    x.sin()".into(), "}".into()]),
            (2, vec!["let y = f(&x)?;".to_string(), "let z = y.sin();".into()]),
            (4, vec!["let y = f(&x)?;".to_string(), "let w = 1;".into()]),
        ];
        let generated = "use jax::prelude::*;\nfn f(x: &Array) -> Result<Array> {\n        x.sin()\n}\npub fn run() {\n  let y = f(&x)?;\n  let w = 1;\n}\n";
        let t = match_lines(generated, &cells);
        assert_eq!(t.get(&1), None);
        assert_eq!(t[&2], CellLine { cell: 1, line: 1, shift: 0 });
        assert_eq!(t[&3], CellLine { cell: 1, line: 2, shift: -4 });
        assert_eq!(t.get(&4), None, "a lone bracket is not matched");
        assert_eq!(t[&6], CellLine { cell: 4, line: 1, shift: -2 });
        assert_eq!(t[&7], CellLine { cell: 4, line: 2, shift: -2 });
    }

    #[test]
    fn statements_sharing_a_line_map_to_it() {
        // evcxr gives every statement of `let f = ..; f.call(..)` a line of its own, and
        // wraps the final expression for display.
        let cell = "let f = jit(|x: Array| Ok(x.sin())); f.call(jnp::arange(3.0))";
        let cells = vec![
            (1, vec!["let y = f.call(&x)?;".to_string()]),
            (2, vec![cell.to_string(), "let a = 1; let g = jit(|x: Array| {".into(), "    x.cos() }); drop(g); r".into()]),
        ];
        let generated = "pub fn run() {\n    let f = jit(|x: Array| Ok(x.sin()));\n(\nf.call(jnp::arange(3.0))\n).evcxr_display();\nlet a = 1;\nlet g = jit(|x: Array| {\n    x.cos() });\ndrop(g);\nr\nOk(())\n}\n";
        let t = match_lines(generated, &cells);
        assert_eq!(t[&2], CellLine { cell: 2, line: 1, shift: -4 });
        assert_eq!(t[&4], CellLine { cell: 2, line: 1, shift: 37 });
        assert_eq!(t[&3], CellLine { cell: 2, line: 1, shift: 37 }, "the `(` before the final expression");
        assert_eq!(t[&6], CellLine { cell: 2, line: 2, shift: 0 });
        assert_eq!(t[&7], CellLine { cell: 2, line: 2, shift: 11 });
        assert_eq!(t[&8], CellLine { cell: 2, line: 3, shift: 0 });
        assert_eq!(t[&9], CellLine { cell: 2, line: 3, shift: 16 });
        assert_eq!(t.get(&10), None, "one letter is not searched for");
        assert_eq!(t.get(&11), None, "no cell line holds it as a statement");
        // An operator expression of two one-letter names (a panicking `&x + &w`).
        let cells = vec![(3, vec!["let x = jnp::arange(3.0); let w = jnp::arange(4.0); &x + &w".to_string()])];
        let ops = match_lines("fn run() {\n(\n&x + &w\n).evcxr_display();\n}\n", &cells);
        assert_eq!(ops[&3], CellLine { cell: 3, line: 1, shift: 52 });
        // The operator's location is the `(` before it (rustc's span of the parenthesised
        // expression): column 1 there is `&x`'s column 53.
        assert_eq!(ops[&2], CellLine { cell: 3, line: 1, shift: 52 });
        let fallback = "fn run() {\nevcxr_send_text_plain(&format!(\"{:?}\",&(\n  &x + &w\n)));\n}\n";
        let ops = match_lines(fallback, &cells);
        assert_eq!(ops[&3], CellLine { cell: 3, line: 1, shift: 50 });
        assert_eq!(40 + ops[&2].shift, 53, "{:?}", ops[&2]);
        assert_eq!(ops.get(&1), None);
        // The final expression's column: `f.call` at generated column 1 is cell column 38.
        let c = t[&4];
        assert_eq!(1 + c.shift, 38);
        assert_eq!(&cell[37..43], "f.call");
    }

    #[test]
    fn locations_outside_generated_crates_are_not_mapped() {
        assert_eq!(map_location(Location::caller()), None);
    }
}
