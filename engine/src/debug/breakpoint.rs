//! `debug::breakpoint!(x, y)`: JAX's `jax.debug.breakpoint()`, a pdb-like prompt (`jdb`)
//! inside traced code. Inside a trace it stages a `debug_callback` equation; when the
//! compiled code reaches it, the named values are concrete and the prompt reads commands:
//! `p NAME` (str), `pp NAME` (repr), `l`/`list` and `w`/`where` (the source line), `c` to
//! continue, `help`. `q` also continues: unlike pdb's, it cannot abort the computation from
//! inside compiled code.
//!
//! Where commands come from: a reader installed with `set_io` (tests, embedders), else the
//! session's input channel when `JAXREPL_INPUT_FIFO` names one: the prompt goes to stdout as
//! one line starting with `INPUT_MARK`, and the front end writes the answer line into the
//! FIFO (`\u{4}` for end of input): the terminal reads a line, the kernel sends Jupyter's
//! `input_request` when the client allows stdin. With no input at all (nbclient runs
//! notebooks without stdin) the breakpoint prints the frame's values and continues.

use crate::error::Result;
use crate::ir::{Primitive, SourceInfo};
use crate::runtime::{callbacks, Buffer};
use crate::trace::{bind, is_tracing, source_info, Array, Operand};
use std::io::{BufRead, Write};
use std::panic::Location;
use std::sync::{Arc, Mutex};

/// A command source and an output sink for the prompt.
pub struct Io {
    /// Shows the prompt (its argument) and returns the next command line, or `None` at end
    /// of input (continue).
    pub read_line: Box<dyn FnMut(&str) -> Option<String> + Send>,
    pub out: Box<dyn Write + Send>,
}

fn installed() -> &'static Mutex<Option<Io>> {
    static IO: Mutex<Option<Io>> = Mutex::new(None);
    &IO
}

/// Installs the prompt's input and output (process-wide); `None` restores the default
/// (`/dev/tty`).
pub fn set_io(io: Option<Io>) {
    *installed().lock().unwrap_or_else(|e| e.into_inner()) = io;
}

/// Stops at this point with `names` bound to `values` (see the module docs); use the
/// `debug::breakpoint!(x, y)` macro. Errors: a failure recorded in the trace.
#[track_caller]
pub fn breakpoint_values(names: &[&str], values: &[Array]) -> Result<()> {
    let loc = Location::caller();
    let site = source_info(loc);
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    if is_tracing() {
        let id = callbacks::register(Arc::new(move |bufs: &[Buffer]| prompt(&site, &names, bufs)));
        let ops = values.iter().cloned().map(Operand::Array).collect();
        bind(Primitive::DebugCallback { callback: id, fmt: String::new() }, ops, loc)?;
        return Ok(());
    }
    let bufs = values.iter().map(|a| a.buffer().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()?;
    prompt(&site, &names, &bufs);
    Ok(())
}

/// `debug::breakpoint!(x, y)`: a `jdb` prompt with `x` and `y` inspectable.
#[macro_export]
macro_rules! debug_breakpoint {
    ($($arg:ident),* $(,)?) => {
        $crate::debug::breakpoint::breakpoint_values(&[$(stringify!($arg)),*], &[$(::std::clone::Clone::clone(&$arg)),*])
    };
}

/// Marks a stdout line that asks the front end for one line of input (the rest is the prompt).
pub const INPUT_MARK: &str = "\u{1}jaxrepl-input:";

/// The session's input FIFO, opened once for the life of the process, read *and* write
/// (Linux allows that on a FIFO): the open never blocks, a read never sees end of file
/// when a front end's writer closes, and an answer written while no prompt is reading
/// stays in the pipe for the next one. Reopening it per prompt raced: a reader opened
/// while the previous answer's writer was still open read end-of-file, an empty
/// command, and asked again.
fn session_fifo(path: &std::ffi::OsStr) -> Option<&'static Mutex<std::io::BufReader<std::fs::File>>> {
    static FIFO: std::sync::OnceLock<Option<Mutex<std::io::BufReader<std::fs::File>>>> = std::sync::OnceLock::new();
    FIFO.get_or_init(|| {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path).ok()?;
        Some(Mutex::new(std::io::BufReader::new(f)))
    })
    .as_ref()
}

fn session_io() -> Option<Io> {
    let fifo = session_fifo(&std::env::var_os("JAXREPL_INPUT_FIFO")?)?;
    Some(Io {
        read_line: Box::new(move |prompt: &str| {
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{INPUT_MARK}{prompt}");
                let _ = out.flush();
            }
            let mut s = String::new();
            let mut reader = fifo.lock().unwrap_or_else(|e| e.into_inner());
            // Blocks until the front end writes a whole line (`\u{4}`: end of input).
            match reader.read_line(&mut s) {
                Ok(n) if n > 0 && !s.starts_with('\u{4}') => Some(s),
                _ => None,
            }
        }),
        out: Box::new(std::io::stdout()),
    })
}

const HELP: &str = "Documented commands (type help <topic>):\n========================================\n\
p NAME   print the value (numpy str)\npp NAME  print the repr\nl, list  show the source line\n\
w, where, bt  show where the breakpoint is\nc, cont, continue  resume\nq, quit, exit  resume (the computation cannot be aborted from inside)\n";

fn source_line(site: &SourceInfo) -> Option<String> {
    if let Some(cell) = site.cell() {
        return crate::trace::cells::cell_source_line(cell, site.line);
    }
    let text = std::fs::read_to_string(&site.file).ok()?;
    text.lines().nth(site.line.checked_sub(1)? as usize).map(|l| l.to_string())
}

/// Runs the prompt for one stop; never fails (I/O errors end it).
fn prompt(site: &SourceInfo, names: &[String], bufs: &[Buffer]) {
    let mut guard = installed().lock().unwrap_or_else(|e| e.into_inner());
    let mut fallback = None;
    let io = match guard.as_mut() {
        Some(io) => io,
        None => match session_io() {
            Some(t) => fallback.insert(t),
            None => {
                println!("Entering jdb at {} (no input channel to read commands from; continuing):", site.line_label());
                for (n, b) in names.iter().zip(bufs) {
                    println!("  {n} = {}", crate::display::array_str_of(b));
                }
                return;
            }
        },
    };
    let _ = run_commands(io, site, names, bufs);
}

fn run_commands(io: &mut Io, site: &SourceInfo, names: &[String], bufs: &[Buffer]) -> std::io::Result<()> {
    let out = &mut io.out;
    writeln!(out, "Entering jdb:")?;
    writeln!(out, "> {}", site.line_label())?;
    let mut first = true;
    loop {
        out.flush()?;
        let Some(line) = (io.read_line)("(jdb) ") else {
            if first {
                // No input at all (a client without stdin): show the frame, then go on.
                writeln!(out, "(no input: continuing) frame:")?;
                for (n, b) in names.iter().zip(bufs) {
                    writeln!(out, "  {n} = {}", crate::display::array_str_of(b))?;
                }
            }
            return out.flush();
        };
        first = false;
        let line = line.trim();
        let (cmd, arg) = line.split_once(' ').map(|(c, a)| (c, a.trim())).unwrap_or((line, ""));
        match cmd {
            "" => {}
            "c" | "cont" | "continue" | "q" | "quit" | "exit" => return Ok(()),
            "p" | "pp" => match names.iter().position(|n| n == arg) {
                Some(i) if cmd == "p" => writeln!(out, "{}", crate::display::array_str_of(&bufs[i]))?,
                Some(i) => writeln!(out, "{}", crate::display::array_repr_of(&bufs[i], false))?,
                None => writeln!(out, "*** NameError: name '{arg}' is not defined; the frame has: {}", names.join(", "))?,
            },
            "l" | "list" => match source_line(site) {
                Some(text) => writeln!(out, "{:>4} -> {}", site.line, text.trim_end())?,
                None => writeln!(out, "{} (source not available)", site.line_label())?,
            },
            "w" | "where" | "bt" => writeln!(out, "> {site}")?,
            "h" | "help" => write!(out, "{HELP}")?,
            other => writeln!(out, "*** Unknown command {other:?}; type help")?,
        }
    }
}
