//! The evaluation session shared by the `jaxrepl` terminal and the Jupyter kernel.
//!
//! A [`Session`] owns one evcxr context, whose evaluation child process (our own binary,
//! re-executed by evcxr; hence `evcxr::runtime_hook()` first in every `main`) holds the
//! cells' variables and the engine's state. The session:
//! - builds in a persistent, exclusively locked directory ([`slots`]), so a warm slot does
//!   not rebuild the engine;
//! - starts the child and evaluates the engine prelude in the background, so a prompt can
//!   show at once; the first [`Session::execute`] waits for it;
//! - rewrites magics ([`magic`]), streams the child's stdout/stderr to a sink while a cell
//!   runs, and turns results, engine error frames, panics, compile errors and child deaths
//!   into [`Output`]s;
//! - interrupts a cell on request ([`InterruptHandle`]): SIGUSR2 first, then after 2 s a
//!   restart of the child, telling which variables were lost.

mod bindings;
mod child;
mod complete;
mod exec;
mod input;
pub mod magic;
mod qmark;
mod render;
pub mod slots;

pub use child::InterruptHandle;
pub use complete::{KEYWORDS, PRELUDE_NAMES, unclosed_error};
#[cfg(test)]
pub(crate) use complete::is_complete as complete_for_tests;

use anyhow::Result;
use child::{Ctx, Shared};
use slots::Slot;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How to start a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Absolute path of the engine crate (`engine/`), used by the prelude's `:dep`.
    pub engine_path: PathBuf,
    /// Whether to evaluate the engine prelude in every new evaluation child.
    pub prelude: bool,
    /// Working directory of the evaluation child (where cells' relative paths resolve);
    /// `None` keeps the front end's.
    pub work_dir: Option<PathBuf>,
}

impl SessionOptions {
    /// Options from the environment: the engine at `$JAXREPL_ENGINE_DIR`, else an
    /// `engine/` directory next to an ancestor of the executable or the current directory,
    /// else the `engine/` of the workspace this crate was built from. The prelude is on
    /// unless `JAXREPL_NO_PRELUDE` is set to something other than `0` or empty.
    pub fn from_env() -> Self {
        let prelude = !matches!(std::env::var("JAXREPL_NO_PRELUDE"), Ok(v) if !v.is_empty() && v != "0");
        SessionOptions {
            engine_path: locate_engine(),
            prelude,
            work_dir: None,
        }
    }
}

fn is_engine_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .map(|t| t.contains("name = \"jax\""))
        .unwrap_or(false)
}

fn locate_engine() -> PathBuf {
    if let Some(dir) = std::env::var_os("JAXREPL_ENGINE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return std::fs::canonicalize(&dir).unwrap_or(dir);
    }
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for start in starts {
        for dir in start.ancestors() {
            let candidate = dir.join("engine");
            if is_engine_dir(&candidate) {
                return std::fs::canonicalize(&candidate).unwrap_or(candidate);
            }
        }
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("engine");
    std::fs::canonicalize(&built_from).unwrap_or(built_from)
}

/// One output of a cell, in the order produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Text the cell wrote to stdout (whole lines, each ending in `\n`).
    Stdout(String),
    /// Text the cell wrote to stderr (whole lines, each ending in `\n`).
    Stderr(String),
    /// Rich output as `(mime, data)` pairs, `text/plain` first when present. The value of a
    /// cell's final expression arrives this way (the kernel makes it the execute_result).
    Display(Vec<(String, String)>),
    /// An error: a compile error (`CompileError`, traceback in rustc's format with
    /// `cell:LINE:COL`), a panic (`Panic`), an engine error, a dead child (`ChildDied`),
    /// an interrupt (`Interrupted`), a bad magic (`MagicError`) and so on.
    Error {
        /// Error class name.
        ename: String,
        /// The message.
        evalue: String,
        /// Lines to show (plain text, no colour codes).
        traceback: Vec<String>,
    },
    /// Progress of a long step (an engine compile over a second, a cell build): shown while
    /// it runs and cleared when `done`. `id` stays the same across one step's events
    /// (`compile-N` for engine compiles, `cell-N` for cell builds). Transient: the terminal
    /// rewrites one status line, Jupyter updates one display in place and empties it at the
    /// end, and scripts and pipes show nothing.
    Progress {
        /// Names the step.
        id: String,
        /// `compiling jit(f) (MLIR → LLVM → native): 1.5 s`.
        text: String,
        /// The step ended (last event of `id`).
        done: bool,
    },
}

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecStatus {
    /// Ran to the end with no error output.
    Ok,
    /// At least one [`Output::Error`] was produced.
    Error,
    /// Stopped by [`InterruptHandle::interrupt`].
    Interrupted,
}

/// Whether some input forms a complete cell (see [`Session::is_complete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completeness {
    /// Ready to execute.
    Complete,
    /// More lines are needed; the string is the indent to offer on the next line.
    Incomplete(String),
    /// Cannot become valid by adding lines (e.g. a stray `}`); execute it to see the error.
    Invalid,
}

/// Completion candidates for the text between byte offsets `start..end` of the code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completions {
    /// Replacement texts, best first, without duplicates.
    pub matches: Vec<String>,
    /// Byte offset where the replaced text starts.
    pub start: usize,
    /// Byte offset where the replaced text ends (normally the cursor).
    pub end: usize,
}

/// What the background start-up thread hands over.
struct Started {
    ctx: Result<Ctx>,
    /// Errors to report with the first execute (e.g. the prelude failed to build).
    notes: Vec<Output>,
}

enum State {
    /// Context creation and prelude running in the background.
    Starting(JoinHandle<Started>),
    /// Ready to evaluate.
    Ready(Box<Ctx>),
    /// No context (creation failed); the next execute tries again.
    Failed(String),
}

/// A live evaluation session. Not `Sync`; drive it from one thread and interrupt it from
/// any thread through [`Session::interrupt_handle`].
pub struct Session {
    opts: SessionOptions,
    slot: Arc<Slot>,
    state: State,
    shared: Arc<Shared>,
    vars: Vec<(String, String)>,
    notes: Vec<Output>,
    /// Cells run so far (names progress events of cell builds).
    cells_run: u64,
    /// The number the front end shows for the next cell (`In [N]`), used in engine
    /// locations (`cell N, line L`); `cells_run + 1` when not set.
    execution_count: Option<u64>,
}

impl Session {
    /// Takes a free build slot and starts the evaluation child and the prelude in the
    /// background; returns at once.
    ///
    /// Errors: no slot could be taken (cache directory not writable, or all in use).
    /// Problems creating the context or building the prelude are reported as error
    /// outputs of the first [`Session::execute`] instead.
    pub fn start(opts: SessionOptions) -> Result<Session> {
        let slot = Arc::new(Slot::acquire(&slots::cache_dir().join("evcxr"))?);
        let shared = Arc::new(Shared::default());
        let handle = {
            let (opts, slot, shared) = (opts.clone(), slot.clone(), shared.clone());
            std::thread::Builder::new()
                .name("jaxrepl-start".into())
                .spawn(move || exec::start_child(&opts, &slot, &shared))?
        };
        Ok(Session {
            opts,
            slot,
            state: State::Starting(handle),
            shared,
            vars: Vec::new(),
            notes: Vec::new(),
            cells_run: 0,
            execution_count: None,
        })
    }

    /// Blocks until the evaluation child is up and the prelude has been evaluated.
    ///
    /// Errors: the context could not be created, or the prelude failed (the message is
    /// also reported by the next execute).
    pub fn wait_ready(&mut self) -> Result<()> {
        self.finish_start(None);
        if let State::Failed(msg) = &self.state {
            anyhow::bail!("{msg}");
        }
        if let Some(Output::Error { evalue, .. }) = self.notes.first() {
            anyhow::bail!("{evalue}");
        }
        Ok(())
    }

    /// Sets the number the front end shows for the next cell (`In [N]`); engine locations
    /// in that cell read `cell N, line L`. Without it, cells are numbered in the order run.
    pub fn set_execution_count(&mut self, n: u64) {
        self.execution_count = Some(n);
    }

    /// Runs one cell, passing every output to `sink` as it appears (stdout/stderr lines
    /// while the cell runs, then displays and errors). Never panics; always returns a status.
    pub fn execute(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> ExecStatus {
        self.execute_with_input(code, sink, &mut |_| None)
    }

    /// `execute`, with `input` answering the cell's requests for a line of input
    /// (`debug::breakpoint!`'s prompt): it gets the prompt and returns the line typed, or
    /// `None` for end of input (the breakpoint continues). See `input.rs`.
    pub fn execute_with_input(
        &mut self,
        code: &str,
        sink: &mut dyn FnMut(Output),
        input: &mut dyn FnMut(&str) -> Option<String>,
    ) -> ExecStatus {
        use std::sync::atomic::Ordering;
        *self.shared.interrupt_at.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.shared.executing.store(true, Ordering::SeqCst);
        let fifo = input::fifo_path(self.slot.dir());
        let mut routed = |out: Output| match input::request_prompt(&out) {
            Some(prompt) => input::answer(&fifo, input(&prompt)),
            None => sink(out),
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute_inner(code, &mut routed)));
        self.shared.executing.store(false, Ordering::SeqCst);
        match result {
            Ok(status) => status,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                // Our state may be inconsistent: start over with a new context.
                self.state = State::Failed(format!("internal error: {msg}"));
                sink(render::simple_error("InternalError", format!(
                    "jaxrepl hit an internal error while running the cell: {msg}\nThe evaluation context will be restarted."
                )));
                ExecStatus::Error
            }
        }
    }

    /// Whether start-up (evaluation child and prelude) has finished, so the next execute
    /// will not wait for it. Does not block.
    pub fn is_ready(&self) -> bool {
        match &self.state {
            State::Starting(handle) => handle.is_finished(),
            _ => true,
        }
    }

    /// A handle that interrupts this session's running cell from another thread.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle { shared: self.shared.clone() }
    }

    /// Whether `code` is a complete cell (brackets, strings and block comments closed).
    /// A magic line is complete when its argument is.
    pub fn is_complete(&self, code: &str) -> Completeness {
        complete::is_complete(code)
    }

    /// Completion candidates at byte offset `cursor` (clamped to the code and to a char
    /// boundary): variables, keywords, prelude names, magics, and rust-analyzer's
    /// completions once the context is up.
    pub fn complete(&mut self, code: &str, cursor: usize) -> Completions {
        let ctx = match &mut self.state {
            State::Ready(ctx) => Some(&mut **ctx),
            _ => None,
        };
        exec::complete(ctx, &self.vars, code, cursor)
    }

    /// Plain-text information about the name at byte offset `cursor`: a variable's type,
    /// or rust-analyzer's hover text. `None` when nothing is known.
    pub fn inspect(&mut self, code: &str, cursor: usize) -> Option<String> {
        let ctx = match &mut self.state {
            State::Ready(ctx) => Some(&mut **ctx),
            _ => None,
        };
        exec::inspect(ctx, &self.vars, code, cursor)
    }

    /// The session's variables as `(name, type)`, sorted by name.
    pub fn variables(&self) -> Vec<(String, String)> {
        self.vars.clone()
    }

    /// The build slot this session holds (0 is the one `jaxrepl --warm` prepares).
    pub fn slot_index(&self) -> usize {
        self.slot.index()
    }

    /// The options this session was started with.
    pub fn options(&self) -> &SessionOptions {
        &self.opts
    }
}
