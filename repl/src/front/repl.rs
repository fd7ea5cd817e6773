//! The interactive prompt (rustyline).
//!
//! Enter submits a cell once its brackets, strings and block comments are closed
//! ([`Session::is_complete`]); otherwise it adds a line (two empty lines force a submit).
//! Ctrl-C at the prompt clears the line (and any pending lines of an unfinished cell);
//! Ctrl-C while a cell runs interrupts it; Ctrl-D on an empty line exits. At a dumb
//! terminal (`TERM=dumb`, where rustyline has no raw mode) [`run_dumb`] reads lines
//! itself, with the same rules. History is kept in `<cache>/history.txt`.
//! Input typed ahead or pasted without bracketed paste (lines separated by LF, Ctrl-J: the
//! same key as Enter) runs line by line, each complete line a cell: rustyline's
//! `buffer-redux` feature keeps what it has read past a submitted line for the next prompt.
//! Ctrl-C at the prompt is bound to submitting the line marked as cleared ([`CtrlCClears`])
//! rather than to rustyline's interrupt: rustyline drops its read-ahead buffer when
//! `readline` ends with an error, so keys typed after a Ctrl-C while the prompt was busy (a
//! slow Tab completion) were lost.

use super::highlight::{self, Language};
use super::term::Printer;
use crate::session::{Completeness, ExecStatus, Output, Session, SessionOptions, slots};
use std::io::IsTerminal;
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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// rustyline helper: validation and completion through the session, Rust highlighting.
struct CellHelper {
    session: Rc<RefCell<Session>>,
    /// Colour the input (a terminal, `NO_COLOR` unset).
    color: bool,
    /// Set by Ctrl-C at the prompt ([`CtrlCClears`]): the line being submitted is dropped.
    cleared: Arc<AtomicBool>,
    /// Whether rust-analyzer has answered a completion in this session (the first answer
    /// takes seconds: it reads the engine crate; the prompt says so meanwhile).
    completed_once: std::cell::Cell<bool>,
}

/// Shown after the cursor while the session's first completion runs.
const FIRST_COMPLETION_NOTE: &str = "  (completing: first time, a few seconds)";

/// The terminal's width in columns (stdout), if it is a terminal.
fn terminal_columns() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize struct for a terminal fd; the result is checked.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// Ctrl-C at the prompt: marks the line as cleared and submits it, so that the prompt loop
/// drops it and shows a fresh prompt. (rustyline's own `Interrupt` ends `readline` with an
/// error, which discards the keys it has already read past the Ctrl-C: a line typed while
/// a Tab completion was still running vanished.)
struct CtrlCClears(Arc<AtomicBool>);

impl rustyline::ConditionalEventHandler for CtrlCClears {
    fn handle(&self, _: &rustyline::Event, _: rustyline::RepeatCount, _: bool, _: &rustyline::EventContext) -> Option<rustyline::Cmd> {
        self.0.store(true, Ordering::SeqCst);
        Some(rustyline::Cmd::AcceptLine)
    }
}

impl Validator for CellHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        if self.cleared.load(Ordering::SeqCst) {
            // Ctrl-C: the line is submitted only to be dropped.
            return Ok(ValidationResult::Valid(None));
        }
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
        // The first rust-analyzer completion of a session takes seconds (longer on a loaded
        // machine): say so after the cursor, then erase the note. Only where it fits on the
        // line (the cursor at the end of a one-line input whose prompt is `In [N]: `).
        let fits = || terminal_columns().is_some_and(|w| "In [100]: ".len() + line.len() + FIRST_COMPLETION_NOTE.len() < w);
        let note = !self.completed_once.get() && session.is_ready() && pos == line.len() && !line.contains('\n') && fits();
        if note {
            use std::io::Write;
            let (dim, reset) = if self.color { ("\x1b[2m", "\x1b[0m") } else { ("", "") };
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\x1b7{dim}{FIRST_COMPLETION_NOTE}{reset}\x1b8");
            let _ = out.flush();
        }
        let found = session.complete(line, pos);
        if session.is_ready() {
            self.completed_once.set(true);
        }
        if note {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\x1b[K");
            let _ = out.flush();
        }
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

/// Runs the interactive prompt until Ctrl-D, or every cell of piped input. Returns
/// whether the exit status is success: always at the prompt; with piped input, whether
/// every cell ran without an error. Errors: the session could not start, or the terminal
/// could not be set up.
pub fn run(opts: SessionOptions) -> Result<bool> {
    let started = Instant::now();
    let session = Rc::new(RefCell::new(Session::start(opts)?));
    let interrupt = session.borrow().interrupt_handle();
    // Ctrl-C during a cell: the terminal is not in raw mode then, so it arrives as SIGINT.
    // (At the prompt rustyline reads it as a key.) Another handler may exist already when
    // embedded; that is not fatal.
    // At a dumb terminal's prompt (no raw mode) Ctrl-C also arrives as SIGINT: it then
    // discards the pending input (`run_dumb`).
    let discard = Arc::new(DumbCtrlC::default());
    let at_prompt = discard.clone();
    let _ = ctrlc::set_handler(move || {
        if interrupt.executing() {
            interrupt.interrupt();
        } else {
            at_prompt.pressed();
        }
    });
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .max_history_size(10_000)?
        .build();
    let mut editor: Editor<CellHelper, DefaultHistory> = Editor::with_config(config)?;
    let printer = Printer::from_env();
    let cleared = Arc::new(AtomicBool::new(false));
    editor.set_helper(Some(CellHelper {
        session: session.clone(),
        color: printer.color,
        cleared: cleared.clone(),
        completed_once: std::cell::Cell::new(false),
    }));
    editor.bind_sequence(
        rustyline::KeyEvent::ctrl('C'),
        rustyline::EventHandler::Conditional(Box::new(CtrlCClears(cleared.clone()))),
    );
    let history = slots::cache_dir().join("history.txt");
    let _ = std::fs::create_dir_all(slots::cache_dir());
    let _ = editor.load_history(&history);
    println!("jaxrepl: Rust cells on the jax engine. %help lists the magics; Ctrl-D exits.");
    if std::env::var_os("JAXREPL_TIMING").is_some() {
        eprintln!("[timing] prompt after {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    if !std::io::stdin().is_terminal() {
        return run_piped(&session, &printer);
    }
    if dumb_terminal() {
        run_dumb(&session, &printer, &discard)?;
        return Ok(true);
    }
    let mut count = 1;
    loop {
        let prompt = format!("In [{count}]: ");
        cleared.store(false, Ordering::SeqCst);
        match editor.readline(&prompt) {
            Ok(_) if cleared.swap(false, Ordering::SeqCst) => {
                // Ctrl-C at the prompt: drop the line, show a fresh prompt.
                continue;
            }
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                let _ = editor.save_history(&history);
                run_cell(&session, &printer, count, &line);
                count += 1;
            }
            Err(ReadlineError::Interrupted) => {
                // A SIGINT at the prompt (Ctrl-C is bound above; this is kept for others).
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let _ = editor.save_history(&history);
    Ok(true)
}

/// Runs one cell numbered `count`, printing its outputs; returns how it ended.
fn run_cell(session: &RefCell<Session>, printer: &Printer, count: usize, line: &str) -> ExecStatus {
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
    let status = session.borrow_mut().execute_with_input(line, &mut |o| printer.print(&o), &mut read_input);
    if std::env::var_os("JAXREPL_TIMING").is_some() {
        eprintln!("[timing] cell {count}: {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    }
    // An interrupted cell has already shown its `Interrupted`/`KeyboardInterrupt` error.
    status
}

/// Whether rustyline treats the terminal as unsupported (no raw mode, no line editing):
/// `TERM` is `dumb`, `cons25` or `emacs` (rustyline's list).
fn dumb_terminal() -> bool {
    std::env::var("TERM").is_ok_and(|t| ["dumb", "cons25", "emacs"].iter().any(|d| d.eq_ignore_ascii_case(&t)))
}

/// The prompt at a dumb terminal (`TERM=dumb`: an editor's shell buffer, a plain serial
/// console): lines are read as the terminal's line discipline delivers them and gathered
/// into cells as with piped input (a cell ends where its brackets, strings and comments
/// close; two empty lines end it anyway), with `In [n]: ` and `   ...: ` prompts. Ctrl-C
/// (SIGINT, the terminal not being in raw mode) discards the pending lines and shows the
/// prompt again, as Ctrl-C does in a continuation line of the full-screen prompt;
/// Ctrl-D at the prompt exits.
fn run_dumb(session: &RefCell<Session>, printer: &Printer, discard: &DumbCtrlC) -> Result<()> {
    use std::io::Write;
    let mut cells = PipedCells::default();
    let mut count = 1;
    let prompt = |count: usize, pending: bool| {
        let p = format!("In [{count}]: ");
        if pending { format!("{:>width$}", "...: ", width = p.len()) } else { p }
    };
    discard.take();
    loop {
        print!("{}", prompt(count, cells.pending()));
        let _ = std::io::stdout().flush();
        discard.set_fresh_prompt(Some(prompt(count, false)));
        let mut line = String::new();
        // A SIGINT does not end the blocking read (the handler's thread takes it, and
        // shows the fresh prompt); the line that follows it starts a new cell.
        let read = std::io::stdin().read_line(&mut line)?;
        discard.set_fresh_prompt(None);
        if discard.take() {
            cells.clear();
            if read == 0 {
                continue;
            }
        }
        if read == 0 {
            println!();
            if let Some(Err(error)) = cells.finish(|c| session.borrow().is_complete(c)) {
                printer.print(&error);
            }
            return Ok(());
        }
        if let Some(cell) = cells.push(&line, |c| session.borrow().is_complete(c)) {
            run_cell(session, printer, count, &cell);
            discard.take();
            count += 1;
        }
    }
}

/// Ctrl-C at a dumb terminal's prompt (see [`run_dumb`]): set from the SIGINT handler's
/// thread, read by the prompt loop.
#[derive(Default)]
struct DumbCtrlC {
    /// Ctrl-C was pressed since the loop last looked: drop the pending lines.
    discard: AtomicBool,
    /// The prompt of a new cell, while the loop waits for a line (shown on Ctrl-C).
    fresh: std::sync::Mutex<Option<String>>,
}

impl DumbCtrlC {
    /// Called on SIGINT outside a cell.
    fn pressed(&self) {
        use std::io::Write;
        self.discard.store(true, Ordering::SeqCst);
        if let Some(p) = self.fresh.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\n{p}");
            let _ = out.flush();
        }
    }

    fn set_fresh_prompt(&self, p: Option<String>) {
        *self.fresh.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Whether Ctrl-C was pressed since the last call.
    fn take(&self) -> bool {
        self.discard.swap(false, Ordering::SeqCst)
    }
}

/// Input from a pipe or file (`printf 'let a = 1;\n' | jaxrepl`): lines are gathered into
/// cells as at the prompt (a cell ends where its brackets, strings and comments close;
/// two empty lines end it anyway), and input still incomplete at the end of the file is
/// reported as an error, not dropped. Returns whether every cell ran without an error.
fn run_piped(session: &RefCell<Session>, printer: &Printer) -> Result<bool> {
    let mut cells = PipedCells::default();
    let mut count = 1;
    let mut all_ok = true;
    loop {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            break;
        }
        if let Some(cell) = cells.push(&line, |c| session.borrow().is_complete(c)) {
            all_ok &= run_cell(session, printer, count, &cell) == ExecStatus::Ok;
            count += 1;
        }
    }
    if let Some(rest) = cells.finish(|c| session.borrow().is_complete(c)) {
        match rest {
            Ok(cell) => all_ok &= run_cell(session, printer, count, &cell) == ExecStatus::Ok,
            Err(error) => {
                printer.print(&error);
                all_ok = false;
            }
        }
    }
    Ok(all_ok)
}

/// Gathers piped lines into cells (see [`run_piped`]).
#[derive(Default)]
struct PipedCells {
    buffer: String,
}

impl PipedCells {
    /// Whether lines of an unfinished cell are waiting.
    fn pending(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Drops the lines of the unfinished cell.
    fn clear(&mut self) {
        self.buffer.clear();
    }

    /// Adds `line` (with its newline, if any); returns a cell when one is complete.
    fn push(&mut self, line: &str, complete: impl Fn(&str) -> Completeness) -> Option<String> {
        self.buffer.push_str(line);
        if self.buffer.trim().is_empty() {
            self.buffer.clear();
            return None;
        }
        let input = self.buffer.strip_suffix('\n').unwrap_or(&self.buffer);
        let forced = input.ends_with("\n\n");
        if forced || !matches!(complete(input), Completeness::Incomplete(_)) {
            let cell = input.trim_end().to_string();
            self.buffer.clear();
            return Some(cell);
        }
        None
    }

    /// At the end of the input: the last cell if it is complete, else the error that says
    /// it is not (and that it did not run); `None` when nothing is left.
    fn finish(&mut self, complete: impl Fn(&str) -> Completeness) -> Option<Result<String, Output>> {
        let rest = std::mem::take(&mut self.buffer);
        let rest = rest.trim_end();
        if rest.trim().is_empty() {
            return None;
        }
        if !matches!(complete(rest), Completeness::Incomplete(_)) {
            return Some(Ok(rest.to_string()));
        }
        let mut traceback = vec!["IncompleteInput: incomplete input at end of file (an unclosed bracket, string or comment); it did not run:".to_string()];
        let text = rest.trim_start_matches('\n');
        traceback.extend(text.lines().map(|l| format!("    {l}")));
        // Which delimiter is open, on its line, with the fix (as for a cell that ran).
        if let Some(Output::Error { traceback: detail, .. }) = crate::session::unclosed_error(text) {
            traceback.push(String::new());
            traceback.extend(detail);
        }
        Some(Err(Output::Error {
            ename: "IncompleteInput".into(),
            evalue: format!("incomplete input at end of file: {}", rest.trim()),
            traceback,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::complete_for_tests as complete;

    #[test]
    fn piped_lines_become_cells_and_an_incomplete_end_is_an_error() {
        let mut cells = PipedCells::default();
        assert_eq!(cells.push("let a = 1;\n", complete), Some("let a = 1;".to_string()));
        assert_eq!(cells.push("\n", complete), None);
        assert_eq!(cells.push("let f = |x: i32| {\n", complete), None);
        assert_eq!(cells.push("    x + 1\n", complete), None);
        assert_eq!(cells.push("};\n", complete), Some("let f = |x: i32| {\n    x + 1\n};".to_string()));
        assert_eq!(cells.push("let b = (a +\n", complete), None);
        let Some(Err(Output::Error { ename, evalue, traceback })) = cells.finish(complete) else { panic!() };
        assert_eq!((ename.as_str(), evalue.as_str()), ("IncompleteInput", "incomplete input at end of file: let b = (a +"));
        assert_eq!(traceback[1], "    let b = (a +");
        assert_eq!(traceback[3], "IncompleteInput: unclosed `(` opened at cell line 1, column 9: the cell ends before it is closed");
        // A last line without its newline still runs; nothing left gives nothing.
        assert_eq!(cells.push("a + 1", complete), Some("a + 1".to_string()));
        assert!(cells.finish(complete).is_none());
        // Two empty lines end a cell anyway (the compiler then speaks).
        assert_eq!(cells.push("let c = (1,\n", complete), None);
        assert_eq!(cells.push("\n", complete), None);
        assert_eq!(cells.push("\n", complete), Some("let c = (1,".to_string()));
    }
}
