//! How arrays are laid out over devices, drawn three ways from one grid of blocks: plain
//! box-drawing text (JAX's `visualize_array_sharding(x, use_color=False)`, byte for byte),
//! ANSI-coloured blocks for a terminal (JAX's coloured `rich` table: one background colour
//! per distinct block, no lines), and HTML for Jupyter (the same layout as a CSS grid, with
//! the bytes each device holds). Also `%mesh`'s drawing of a mesh's device grid.
//!
//! Colours follow `jax/_src/debugging.py::make_color_iter`: matplotlib's `tab20b` colour
//! map sampled at `linspace(0, 1, n)` with stride `n // 2 + (n even)`, and black or white
//! text by luminance (`r*.299 + g*.587 + b*.114 > 186`).

use crate::interactive::TextRepr;
use std::fmt;

/// The MIME type of the ANSI-coloured text a terminal shows instead of `text/plain`.
pub const ANSI_MIME: &str = "application/vnd.jaxrepl.ansi";

/// matplotlib's `tab20b` colours (RGB, 0-255).
const TAB20B: [(u8, u8, u8); 20] = [
    (0x39, 0x3b, 0x79), (0x52, 0x54, 0xa3), (0x6b, 0x6e, 0xcf), (0x9c, 0x9e, 0xde),
    (0x63, 0x79, 0x39), (0x8c, 0xa2, 0x52), (0xb5, 0xcf, 0x6b), (0xce, 0xdb, 0x9c),
    (0x8c, 0x6d, 0x31), (0xbd, 0x9e, 0x39), (0xe7, 0xba, 0x52), (0xe7, 0xcb, 0x94),
    (0x84, 0x3c, 0x39), (0xad, 0x49, 0x4a), (0xd6, 0x61, 0x6b), (0xe7, 0x96, 0x9c),
    (0x7b, 0x41, 0x73), (0xa5, 0x51, 0x94), (0xce, 0x6d, 0xbd), (0xde, 0x9e, 0xd6),
];

/// JAX's colour sequence for `n` blocks.
fn colors(n: usize) -> Vec<(u8, u8, u8)> {
    let mut out = Vec::with_capacity(n);
    let mut idx = 0usize;
    for _ in 0..n {
        let v = if n > 1 { idx as f64 / (n - 1) as f64 } else { 0.0 };
        out.push(TAB20B[((v * 20.0) as usize).min(19)]);
        idx = (idx + n / 2 + usize::from(n % 2 == 0)) % n.max(1);
    }
    out
}

fn text_color(c: (u8, u8, u8)) -> (u8, u8, u8) {
    if c.0 as f64 * 0.299 + c.1 as f64 * 0.587 + c.2 as f64 * 0.114 > 186.0 {
        (0, 0, 0)
    } else {
        (255, 255, 255)
    }
}

/// One block of the drawing: its label, its cell size in characters/lines (before
/// alignment), and the note shown under the label in HTML (bytes per device).
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub(crate) row: usize,
    pub(crate) col: usize,
    pub(crate) label: String,
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) note: String,
}

/// A drawing of blocks on a grid: `{}`/`text_repr` is the plain text table; a cell also
/// carries the coloured terminal form and the HTML form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardingView {
    /// JAX's plain text table (`use_color=False`).
    pub plain: String,
    /// The same layout as ANSI-coloured blocks.
    pub ansi: String,
    /// The same layout as an HTML grid, with per-device bytes.
    pub html: String,
}

impl ShardingView {
    /// Lays out `blocks` (row, col) as JAX's rich table does: each cell's label centred
    /// with `divmod` padding in its `width`/`height`, columns as wide as their widest cell.
    /// `title` goes above the HTML grid (and the text forms when `text_title`), `row_labels`
    /// / `col_labels` (for meshes) beside and above the grid.
    pub(crate) fn new(blocks: &[Block], title: &str, text_title: bool, row_labels: &[String], col_labels: &[String]) -> ShardingView {
        let rows = blocks.iter().map(|b| b.row).max().unwrap_or(0) + 1;
        let cols = blocks.iter().map(|b| b.col).max().unwrap_or(0) + 1;
        let mut grid: Vec<Vec<Vec<String>>> = vec![vec![vec![]; cols]; rows];
        let mut bidx: Vec<Vec<Option<usize>>> = vec![vec![None; cols]; rows];
        for (k, b) in blocks.iter().enumerate() {
            let (l, rem) = div_mod(b.width as i64 - b.label.chars().count() as i64 - 2, 2);
            let (left, right) = (l.max(0) as usize, (l + rem).max(0) as usize);
            let (t, rem) = div_mod(b.height as i64 - 2, 2);
            let (top, bottom) = (t.max(0) as usize, (t + rem).max(0) as usize);
            let width = left + b.label.chars().count() + right;
            let mut lines = vec![" ".repeat(width); top];
            lines.push(format!("{}{}{}", " ".repeat(left), b.label, " ".repeat(right)));
            lines.extend(vec![" ".repeat(width); bottom]);
            grid[b.row][b.col] = lines;
            bidx[b.row][b.col] = Some(k);
        }
        let mut col_w: Vec<usize> =
            (0..cols).map(|c| (0..rows).map(|r| grid[r][c].first().map(|s| s.chars().count()).unwrap_or(0)).max().unwrap_or(0)).collect();
        for (c, l) in col_labels.iter().enumerate().take(cols) {
            col_w[c] = col_w[c].max(l.chars().count());
        }
        let lw = row_labels.iter().map(|l| l.chars().count()).max().map(|w| w + 1).unwrap_or(0);
        // JAX draws on a rich console `max_width` (80) wide: wider tables are squeezed, but
        // never below a column's widest block label (`CPU 0,1`), which stays readable (a
        // mesh with long axis names may then be wider than 80 columns).
        let label_w: Vec<usize> = (0..cols).map(|c| blocks.iter().filter(|b| b.col == c).map(|b| b.label.chars().count()).max().unwrap_or(0)).collect();
        let col_w: Vec<usize> = fit_widths(&col_w, MAX_WIDTH.saturating_sub(cols + 1 + lw)).into_iter().zip(&label_w).map(|(w, &l)| w.max(l)).collect();
        // A column head longer than its column keeps its end (`…ong_name=2`: the index).
        let head = |c: usize| -> String {
            let l: String = col_labels
                .get(c)
                .map(|s| {
                    let n = s.chars().count();
                    if n <= col_w[c] { s.clone() } else { std::iter::once('…').chain(s.chars().skip(n + 1 - col_w[c].max(1))).collect() }
                })
                .unwrap_or_default();
            let pad = col_w[c] - l.chars().count();
            format!("{}{l}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
        };
        let heights: Vec<usize> = grid.iter().map(|row| row.iter().map(|c| c.len()).max().unwrap_or(1).max(1)).collect();
        let cell_line = |r: usize, c: usize, line: usize| -> String {
            let cell = &grid[r][c];
            let off = (heights[r] - cell.len()) / 2;
            let text = if line >= off && line - off < cell.len() { cell[line - off].clone() } else { String::new() };
            // A squeezed cell keeps its label, centred (rich crops it away behind the padding).
            let text = if text.chars().count() > col_w[c] { text.trim().chars().take(col_w[c]).collect() } else { text };
            let pad = col_w[c] - text.chars().count();
            format!("{}{text}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
        };
        let margin = |r: Option<usize>, line: usize| -> String {
            if lw == 0 {
                return String::new();
            }
            match r {
                Some(r) if line == (heights[r] - 1) / 2 => format!("{:<w$}", row_labels.get(r).map(|s| s.as_str()).unwrap_or(""), w = lw),
                _ => " ".repeat(lw),
            }
        };
        // Plain: JAX's SQUARE box with lines between rows.
        let mut plain = String::new();
        if text_title {
            plain.push_str(title);
            plain.push('\n');
        }
        if !col_labels.is_empty() {
            plain.push_str(&margin(None, 0));
            plain.push(' ');
            let heads: Vec<String> = (0..cols).map(head).collect();
            plain.push_str(heads.join(" ").trim_end());
            plain.push('\n');
        }
        let rule = |l: &str, m: &str, r: &str| format!("{}{l}{}{r}\n", margin(None, 0), col_w.iter().map(|w| "─".repeat(*w)).collect::<Vec<_>>().join(m));
        plain.push_str(&rule("┌", "┬", "┐"));
        for r in 0..rows {
            for line in 0..heights[r] {
                plain.push_str(&margin(Some(r), line));
                plain.push('│');
                for c in 0..cols {
                    plain.push_str(&cell_line(r, c, line));
                    plain.push('│');
                }
                plain.push('\n');
            }
            if r + 1 < rows {
                plain.push_str(&rule("├", "┼", "┤"));
            }
        }
        plain.push_str(&rule("└", "┴", "┘"));
        // ANSI: coloured blocks, no lines (JAX's `use_color=True`).
        let palette = colors(blocks.len());
        let color_of = |r: usize, c: usize| bidx[r][c].map(|k| palette[k]);
        let mut ansi = String::new();
        if text_title {
            ansi.push_str(title);
            ansi.push('\n');
        }
        if !col_labels.is_empty() {
            ansi.push_str(&margin(None, 0));
            for c in 0..cols {
                ansi.push_str(&head(c));
            }
            ansi.push('\n');
        }
        for r in 0..rows {
            for line in 0..heights[r] {
                ansi.push_str(&margin(Some(r), line));
                for c in 0..cols {
                    let t = cell_line(r, c, line);
                    match color_of(r, c) {
                        Some(bg) => {
                            let fg = text_color(bg);
                            ansi.push_str(&format!(
                                "\x1b[38;2;{};{};{}m\x1b[48;2;{};{};{}m{t}\x1b[0m",
                                fg.0, fg.1, fg.2, bg.0, bg.1, bg.2
                            ));
                        }
                        None => ansi.push_str(&t),
                    }
                }
                ansi.push('\n');
            }
        }
        // HTML: a CSS grid with the same column widths (ch) and row heights (lines).
        let mut html = String::from("<div class=\"jaxrepl-sharding\" style=\"font-family:monospace;display:inline-block\">");
        html.push_str(&format!("<div style=\"margin-bottom:4px\">{}</div>", escape(title)));
        let lab_col = if row_labels.is_empty() { String::new() } else { format!("{}ch ", lw.max(2)) };
        let template_cols: Vec<String> = col_w.iter().map(|w| format!("{}ch", (*w).max(6) + 2)).collect();
        let template_rows: Vec<String> = heights.iter().map(|h| format!("{:.1}em", (*h as f64 * 1.3).max(2.6))).collect();
        html.push_str(&format!(
            "<div style=\"display:grid;grid-template-columns:{lab_col}{};grid-template-rows:{}{};gap:1px;background:#fff\">",
            template_cols.join(" "),
            if col_labels.is_empty() { "" } else { "1.4em " },
            template_rows.join(" ")
        ));
        if !col_labels.is_empty() {
            if !row_labels.is_empty() {
                html.push_str("<div></div>");
            }
            for c in 0..cols {
                html.push_str(&format!("<div style=\"text-align:center\">{}</div>", escape(col_labels.get(c).map(|s| s.as_str()).unwrap_or(""))));
            }
        }
        for r in 0..rows {
            if !row_labels.is_empty() {
                html.push_str(&format!(
                    "<div style=\"display:flex;align-items:center\">{}</div>",
                    escape(row_labels.get(r).map(|s| s.as_str()).unwrap_or(""))
                ));
            }
            for c in 0..cols {
                match bidx[r][c] {
                    Some(k) => {
                        let b = &blocks[k];
                        let bg = palette[k];
                        let fg = text_color(bg);
                        html.push_str(&format!(
                            "<div title=\"{}\" style=\"background:rgb({},{},{});color:rgb({},{},{});display:flex;flex-direction:column;align-items:center;justify-content:center;text-align:center\"><span>{}</span>{}</div>",
                            escape(&format!("{} {}", b.label, b.note)),
                            bg.0, bg.1, bg.2, fg.0, fg.1, fg.2,
                            escape(&b.label),
                            if b.note.is_empty() { String::new() } else { format!("<span style=\"font-size:80%\">{}</span>", escape(&b.note)) }
                        ));
                    }
                    None => html.push_str("<div></div>"),
                }
            }
        }
        html.push_str("</div></div>");
        ShardingView { plain, ansi, html }
    }
}

/// `html_escape`, plus `"` (the text may land in an attribute).
/// The width JAX's `visualize_sharding` draws in (its `max_width`, the rich console's
/// width), in characters.
const MAX_WIDTH: usize = 80;

/// Column widths (characters, borders excluded) squeezed into `max` as rich's `Table`
/// does (rich 13 `Table._calculate_column_widths`: each column measured at most `max`,
/// then `_collapse_widths` trims the widest columns towards the next widest, then
/// `ratio_reduce` takes the rest evenly), so a wide array's table matches JAX's widths.
fn fit_widths(widths: &[usize], max: usize) -> Vec<usize> {
    let mut w: Vec<usize> = widths.iter().map(|&x| x.min(max)).collect();
    let total = |w: &[usize]| w.iter().sum::<usize>();
    while total(&w) > max {
        let excess = total(&w) - max;
        let top = *w.iter().max().unwrap_or(&0);
        let second = w.iter().filter(|&&x| x != top).max().copied().unwrap_or(0);
        if top == second {
            break;
        }
        let ratios: Vec<usize> = w.iter().map(|&x| usize::from(x == top)).collect();
        w = ratio_reduce(excess, &ratios, &vec![excess.min(top - second); w.len()], &w);
    }
    if total(&w) > max {
        let excess = total(&w) - max;
        w = ratio_reduce(excess, &vec![1; w.len()], &w.clone(), &w);
    }
    w
}

/// rich's `ratio_reduce`: takes `total` from `values` in proportion to `ratios`, at most
/// `maximums[i]` from each, rounding half to even as Python's `round`.
fn ratio_reduce(total: usize, ratios: &[usize], maximums: &[usize], values: &[usize]) -> Vec<usize> {
    let ratios: Vec<usize> = ratios.iter().zip(maximums).map(|(&r, &m)| if m > 0 { r } else { 0 }).collect();
    let mut total_ratio: usize = ratios.iter().sum();
    let mut remaining = total;
    let mut out = Vec::with_capacity(values.len());
    for ((&r, &m), &v) in ratios.iter().zip(maximums).zip(values) {
        if r > 0 && total_ratio > 0 {
            let (num, den) = (r * remaining, total_ratio);
            let (q, rem) = (num / den, num % den);
            let rounded = if 2 * rem > den || (2 * rem == den && q % 2 == 1) { q + 1 } else { q };
            let d = m.min(rounded).min(v);
            out.push(v - d);
            remaining = remaining.saturating_sub(d);
            total_ratio -= r;
        } else {
            out.push(v);
        }
    }
    out
}

fn escape(s: &str) -> String {
    crate::display::html_escape(s).replace('"', "&quot;")
}

/// Python's `divmod` for integers (floor division).
fn div_mod(a: i64, b: i64) -> (i64, i64) {
    let q = a.div_euclid(b);
    (q, a - q * b)
}

impl fmt::Display for ShardingView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.plain)
    }
}

impl std::ops::Deref for ShardingView {
    type Target = str;
    fn deref(&self) -> &str {
        &self.plain
    }
}

impl PartialEq<String> for ShardingView {
    fn eq(&self, other: &String) -> bool {
        &self.plain == other
    }
}
impl PartialEq<&str> for ShardingView {
    fn eq(&self, other: &&str) -> bool {
        self.plain == *other
    }
}

impl TextRepr for ShardingView {
    fn text_repr(&self) -> String {
        self.plain.clone()
    }
    /// Jupyter shows the HTML grid; the terminal the ANSI-coloured blocks.
    fn rich(&self) -> Vec<(&'static str, String)> {
        vec![("text/html", self.html.clone()), (ANSI_MIME, self.ansi.clone())]
    }
}

/// Human-readable bytes: `64 B`, `1.5 KiB`, `2.0 MiB`.
pub(crate) fn bytes_text(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1 << 20 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    }
}
