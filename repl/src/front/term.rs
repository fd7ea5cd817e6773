//! Plain-text rendering of session outputs for a terminal or a pipe.

use crate::session::Output;
use std::io::{IsTerminal, Write};

/// Where and how to print outputs.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// Colour error text (red) on stderr/stdout.
    pub color: bool,
}

impl Printer {
    /// Colours when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Printer { color: !no_color && std::io::stdout().is_terminal() }
    }

    /// Prints one output: streams as they are, displays as their `text/plain` (or a note
    /// naming the rich types), errors as their traceback, in red when colouring.
    pub fn print(&self, output: &Output) {
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
                let _ = writeln!(out, "{}", display_text(items));
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
        }
        let _ = out.flush();
    }
}

/// The text a terminal shows for a display: its `text/plain`, else a note listing the
/// MIME types it carries.
pub fn display_text(items: &[(String, String)]) -> String {
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
        assert_eq!(display_text(&items), "1");
        let items = vec![("image/svg+xml".to_string(), "<svg/>".to_string())];
        assert_eq!(display_text(&items), "[rich output (image/svg+xml, 6 bytes); view it in Jupyter]");
    }
}
