//! Plain-text rendering of session outputs for a terminal or a pipe.

use super::highlight;
use crate::session::Output;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a progress status line is on the terminal now (it is cleared before any other
/// output is printed).
static STATUS_SHOWN: AtomicBool = AtomicBool::new(false);

/// Where and how to print outputs.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// Colour error text (red) and IR outputs (jaxprs, MLIR, LLVM IR) on a terminal.
    pub color: bool,
    /// Show progress events as a status line on stderr (a terminal), rewritten in place.
    pub progress: bool,
}

impl Printer {
    /// Colours when stdout is a terminal and `NO_COLOR` is unset or empty; progress when
    /// stderr is a terminal and `JAXREPL_PROGRESS` is not `0`.
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let progress_off = std::env::var("JAXREPL_PROGRESS").is_ok_and(|v| v == "0");
        Printer {
            color: !no_color && std::io::stdout().is_terminal(),
            progress: !progress_off && std::io::stderr().is_terminal(),
        }
    }

    /// Clears the progress status line if one is shown.
    fn clear_status(&self) {
        if STATUS_SHOWN.swap(false, Ordering::Relaxed) {
            let _ = std::io::stderr().write_all(b"\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }

    /// Prints one output: streams as they are, displays as their `text/plain` (or a note
    /// naming the rich types), errors as their traceback, in red when colouring.
    pub fn print(&self, output: &Output) {
        if let Output::Progress { text, done, .. } = output {
            if self.progress {
                self.clear_status();
                if !done {
                    let (on, off) = if self.color { ("\x1b[2m", "\x1b[0m") } else { ("", "") };
                    let _ = write!(std::io::stderr(), "{on}{text}{off}");
                    let _ = std::io::stderr().flush();
                    STATUS_SHOWN.store(true, Ordering::Relaxed);
                }
            }
            return;
        }
        self.clear_status();
        let mut out = std::io::stdout().lock();
        match output {
            Output::Stdout(text) => {
                let _ = out.write_all(text.as_bytes());
            }
            Output::Stderr(text) => {
                let _ = out.flush();
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
            Output::Display(items) => {
                let text = display_text(items, self.color);
                let text = match highlight::detect_ir(&text) {
                    Some(lang) if self.color => highlight::highlight(&text, lang),
                    _ => text,
                };
                let _ = writeln!(out, "{text}");
            }
            Output::Error { ename, evalue, traceback } => {
                let lines: Vec<String> = if traceback.is_empty() {
                    vec![format!("{ename}: {evalue}")]
                } else {
                    traceback.clone()
                };
                let (on, off) = if self.color { ("\x1b[31m", "\x1b[0m") } else { ("", "") };
                for line in lines {
                    let _ = writeln!(out, "{on}{line}{off}");
                }
            }
            Output::Progress { .. } => {}
        }
        let _ = out.flush();
    }
}

/// The text a terminal shows for a display: its coloured terminal form when `color`
/// (`%sharding`'s blocks; not with `NO_COLOR` or output to a file), else its `text/plain`
/// (JAX's `use_color=False` table), else a note listing the MIME types it carries.
pub fn display_text(items: &[(String, String)], color: bool) -> String {
    if color && let Some((_, text)) = items.iter().find(|(m, _)| m == "application/vnd.jaxrepl.ansi") {
        return text.trim_end_matches('\n').to_string();
    }
    if let Some((_, text)) = items.iter().find(|(m, _)| m == "text/plain") {
        return text.trim_end_matches('\n').to_string();
    }
    let kinds: Vec<String> = items
        .iter()
        .map(|(m, d)| format!("{m}, {} bytes", d.len()))
        .collect();
    format!("[rich output ({}); view it in Jupyter]", kinds.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_prefers_plain_text() {
        let items = vec![("text/html".to_string(), "<b>1</b>".to_string()), ("text/plain".to_string(), "1\n".to_string())];
        assert_eq!(display_text(&items, true), "1");
        let items = vec![("image/svg+xml".to_string(), "<svg/>".to_string())];
        assert_eq!(display_text(&items, true), "[rich output (image/svg+xml, 6 bytes); view it in Jupyter]");
    }

    #[test]
    fn coloured_drawings_only_when_colouring() {
        let items = vec![
            ("text/plain".to_string(), "┌─────┐\n│CPU 0│\n└─────┘\n".to_string()),
            ("application/vnd.jaxrepl.ansi".to_string(), "\x1b[48;2;57;59;121m CPU 0 \x1b[0m\n".to_string()),
        ];
        assert_eq!(display_text(&items, true), "\x1b[48;2;57;59;121m CPU 0 \x1b[0m");
        // NO_COLOR or output to a file: JAX's plain table (`use_color=False`).
        assert_eq!(display_text(&items, false), "┌─────┐\n│CPU 0│\n└─────┘");
    }
}
