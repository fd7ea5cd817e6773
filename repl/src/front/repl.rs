//! The interactive prompt (rustyline).
//!
//! Enter submits a cell once its brackets, strings and block comments are closed
//! ([`Session::is_complete`]); otherwise it adds a line (two empty lines force a submit).
//! Ctrl-C at the prompt clears the line; Ctrl-C while a cell runs interrupts it; Ctrl-D
//! on an empty line exits. History is kept in `<cache>/history.txt`.
//! Input typed ahead or pasted without bracketed paste (lines separated by LF, Ctrl-J: the
//! same key as Enter) runs line by line, each complete line a cell: rustyline's
//! `buffer-redux` feature keeps what it has read past a submitted line for the next prompt.

use super::highlight::{self, Language};
use super::term::Printer;
use crate::session::{Completeness, ExecStatus, Session, SessionOptions, slots};
use anyhow::Result;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{CompletionType, Config, Context, Editor, Helper};
use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

/// rustyline helper: validation and completion through the session, Rust highlighting.
struct CellHelper {
    session: Rc<RefCell<Session>>,
    /// Colour the input (a terminal, `NO_COLOR` unset).
    color: bool,
}

impl Validator for CellHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        if input.ends_with("\n\n") {
            // Two empty lines: submit whatever is there and let the compiler speak.
            return Ok(ValidationResult::Valid(None));
        }
        let complete = match self.session.try_borrow() {
            Ok(s) => s.is_complete(input),
            Err(_) => Completeness::Complete,
        };
        Ok(match complete {
            Completeness::Incomplete(_) => ValidationResult::Incomplete,
            Completeness::Complete | Completeness::Invalid => ValidationResult::Valid(None),
        })
    }
}

impl Completer for CellHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let Ok(mut session) = self.session.try_borrow_mut() else {
            return Ok((pos, Vec::new()));
        };
        let found = session.complete(line, pos);
        let pairs = found
            .matches
            .into_iter()
            .map(|m| Pair { display: m.clone(), replacement: m })
            .collect();
        Ok((found.start, pairs))
    }
}

impl Hinter for CellHelper {
    type Hint = String;
}

impl Highlighter for CellHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        if !self.color || line.is_empty() {
            return Cow::Borrowed(line);
        }
        Cow::Owned(highlight::highlight(line, Language::Rust))
    }

    fn highlight_char(&self, _line: &str, _pos: usize, _kind: CmdKind) -> bool {
        // Any edit can change the colours of the whole input (an opened string or comment).
        self.color
    }
}

impl Helper for CellHelper {}

/// Runs the interactive prompt until Ctrl-D. Errors: the session could not start, or the
/// terminal could not be set up.
pub fn run(opts: SessionOptions) -> Result<()> {
    let started = Instant::now();
    let session = Rc::new(RefCell::new(Session::start(opts)?));
    let interrupt = session.borrow().interrupt_handle();
    // Ctrl-C during a cell: the terminal is not in raw mode then, so it arrives as SIGINT.
    // (At the prompt rustyline reads it as a key.) Another handler may exist already when
    // embedded; that is not fatal.
    let _ = ctrlc::set_handler(move || interrupt.interrupt());
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .max_history_size(10_000)?
        .build();
    let mut editor: Editor<CellHelper, DefaultHistory> = Editor::with_config(config)?;
    let printer = Printer::from_env();
    editor.set_helper(Some(CellHelper { session: session.clone(), color: printer.color }));
    let history = slots::cache_dir().join("history.txt");
    let _ = std::fs::create_dir_all(slots::cache_dir());
    let _ = editor.load_history(&history);
    println!("jaxrepl: Rust cells on the jax engine. %help lists the magics; Ctrl-D exits.");
    if std::env::var_os("JAXREPL_TIMING").is_some() {
        eprintln!("[timing] prompt after {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    let mut count = 1;
    loop {
        let prompt = format!("In [{count}]: ");
        match editor.readline(&prompt) {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                let _ = editor.save_history(&history);
                let t0 = Instant::now();
                if !session.borrow().is_ready() {
                    eprintln!("(the session is still starting: its evaluation process is not ready yet; Ctrl-C stops waiting)");
                }
                // A cell's requests for input (debug::breakpoint!'s jdb prompt) read a line here.
                let mut read_input = |prompt: &str| -> Option<String> {
                    use std::io::Write;
                    print!("{prompt}");
                    let _ = std::io::stdout().flush();
                    let mut answer = String::new();
                    match std::io::stdin().read_line(&mut answer) {
                        Ok(0) | Err(_) => None,
                        Ok(_) => Some(answer),
                    }
                };
                session.borrow_mut().set_execution_count(count as u64);
                let status = session.borrow_mut().execute_with_input(&line, &mut |o| printer.print(&o), &mut read_input);
                if std::env::var_os("JAXREPL_TIMING").is_some() {
                    eprintln!("[timing] cell {count}: {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
                }
                if status == ExecStatus::Interrupted {
                    println!("(interrupted)");
                }
                count += 1;
            }
            Err(ReadlineError::Interrupted) => {
                // Ctrl-C at the prompt: drop the line, show a fresh prompt.
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let _ = editor.save_history(&history);
    Ok(())
}
