//! Creating the evcxr context (and with it the evaluation child process), the code run in
//! every fresh child (our panic hook, the engine prelude), and the interrupt handle.

use super::render::PANIC_MIME;
use super::slots::Slot;
use anyhow::{Result, anyhow};
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Build variables the engine needs (MLIR/LLVM 22 as shared libraries). evcxr's cargo runs
/// do not read our `.cargo/config.toml`, so they are put in the process environment.
pub const BUILD_ENV_DEFAULTS: &[(&str, &str)] = &[
    ("MLIR_SYS_220_PREFIX", "/usr/lib/llvm-22"),
    ("TABLEGEN_220_PREFIX", "/usr/lib/llvm-22"),
    ("LIBCLANG_PATH", "/usr/lib/llvm-22/lib"),
    ("MLIR_SYS_LINK_SHARED", "1"),
];

/// Cargo's `term.quiet` setting as an environment variable: set for evcxr's builds (see
/// [`create_context`]) unless the user set it.
const CARGO_QUIET: &str = "CARGO_TERM_QUIET";
/// Whether we set [`CARGO_QUIET`] (the user had not).
static QUIETED: AtomicBool = AtomicBool::new(false);

/// Serializes context creation within this process: `EVCXR_TMPDIR` is read from the process
/// environment when a context is created, so two sessions starting at once must not
/// interleave setting it and reading it.
static CREATE_LOCK: Mutex<()> = Mutex::new(());

/// Code evaluated in every fresh child before anything else. It replaces the panic hook
/// with one that reports the panic as a framed block on stdout, which evcxr collects with
/// the cell's other outputs (so there is no race with stderr), instead of the default
/// message plus the backtrace that evcxr's `RUST_BACKTRACE=1` would print.
pub const PANIC_HOOK: &str = r#"std::panic::set_hook(Box::new(|info: &std::panic::PanicHookInfo<'_>| {
    use std::io::Write as _;
    fn jaxrepl_json(s: &str) -> String {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                '\n' => o.push_str("\\n"),
                '\r' => o.push_str("\\r"),
                '\t' => o.push_str("\\t"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    }
    let payload = info.payload();
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        String::from("Box<dyn Any>")
    };
    let location = info.location().map(|l| LOCATION).unwrap_or_default();
    let thread = std::thread::current().name().unwrap_or("").to_string();
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "EVCXR_BEGIN_CONTENT MIME\n{{\"message\":{},\"location\":{},\"thread\":{}}}\nEVCXR_END_CONTENT\n",
        jaxrepl_json(&message), jaxrepl_json(&location), jaxrepl_json(&thread));
    let _ = out.flush();
}));"#;

/// The panic hook with our MIME type filled in. With `engine`, a panic's location is
/// shown as the engine shows locations (`cell N, line L` for a cell's line:
/// `jax::interactive::location_label`); without, as `file:line:column`.
pub fn panic_hook_code(engine: bool) -> String {
    let location = if engine {
        "jax::interactive::location_label(l)"
    } else {
        r#"format!("{}:{}:{}", l.file(), l.line(), l.column())"#
    };
    PANIC_HOOK.replace("MIME", PANIC_MIME).replace("LOCATION", location)
}

/// The engine prelude (docs/engine-api.md) for the engine crate at `engine_dir`.
pub fn prelude_code(engine_dir: &std::path::Path) -> String {
    let path = engine_dir.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        ":dep jax = {{ path = \"{path}\" }}\nuse jax::prelude::*;\njax::interactive::init_session();"
    )
}

/// Everything a live evaluation child comes with.
pub struct Ctx {
    /// evcxr's command-level context (handles `:dep` and other `:` commands).
    pub cmd: evcxr::CommandContext,
    /// The child's stdout lines (not evcxr protocol) and stderr lines.
    pub outputs: evcxr::EvalContextOutputs,
    /// Whether the engine prelude is loaded (cells then register their lines with the
    /// engine: `jax::interactive::enter_cell`).
    pub engine: bool,
    /// Whether evcxr's `?` support is on, so cells get the `?` stop hook (`qmark.rs`).
    pub stop_hook: bool,
}

/// Creates an evcxr context building in `slot`, with the MLIR build variables set; the
/// child runs in `work_dir` when given.
///
/// Errors: evcxr could not start (no cargo/rustc, or its first trial cell failed).
pub fn create_context(slot: &Slot, work_dir: Option<&std::path::Path>) -> Result<Ctx> {
    let _guard = CREATE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for (key, value) in BUILD_ENV_DEFAULTS {
        if std::env::var_os(key).is_none() {
            // SAFETY: serialized by CREATE_LOCK; std's own env accesses take std's env lock.
            unsafe { std::env::set_var(key, value) };
        }
    }
    // SAFETY: as above. evcxr reads this variable while creating the context, below.
    unsafe { std::env::set_var("EVCXR_TMPDIR", slot.dir()) };
    // evcxr copies cargo's `Compiling <crate>` lines (the engine's `:dep` in a fresh slot,
    // any `:dep` of the user) to our stderr, where they land between a cell's outputs.
    // Quiet cargo prints none; its errors still reach evcxr (and so the cell's error), and
    // a long build shows as the session's progress line instead.
    if std::env::var_os(CARGO_QUIET).is_none() {
        // SAFETY: as above.
        unsafe { std::env::set_var(CARGO_QUIET, "true") };
        QUIETED.store(true, Ordering::SeqCst);
    }
    let quieted = QUIETED.load(Ordering::SeqCst);
    let exe = std::env::current_exe().map_err(|e| anyhow!("cannot find our own executable: {e}"))?;
    let mut command = std::process::Command::new(exe);
    // The child gets its own process group, so a Ctrl-C typed in the terminal reaches only
    // the front end (which turns it into an interrupt) and does not kill the child.
    command.process_group(0);
    if let Some(dir) = work_dir {
        command.current_dir(dir);
    }
    command.env("LD_LIBRARY_PATH", child_library_path());
    if quieted {
        // Cargo run by the user's own cells (std::process::Command) talks as usual.
        command.env_remove(CARGO_QUIET);
    }
    // The engine's input channel (debug::breakpoint!), answered by the session (input.rs).
    if let Some(fifo) = super::input::make_fifo(slot.dir()) {
        command.env("JAXREPL_INPUT_FIFO", fifo);
    }
    let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || evcxr::EvalContext::with_subprocess_command(command)));
    let (eval, outputs) = match created {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(anyhow!("could not start the evaluation context: {e}")),
        Err(_) => return Err(anyhow!("evcxr panicked while starting the evaluation context")),
    };
    Ok(Ctx {
        cmd: evcxr::CommandContext::with_eval_context(eval),
        outputs,
        engine: false,
        stop_hook: false,
    })
}

/// `LD_LIBRARY_PATH` for the child: rustc's target library directory (where the cells'
/// `libstd-*.so` lives), MLIR's library directory, then any inherited value.
///
/// Cells find libstd through a relative RUNPATH that rustc computes for `deps/`; evcxr
/// loads the copy one directory up, so when the build slot and the toolchain share a
/// prefix (a slot under `~/.cache` with rustup in `~/.rustup`) that path is wrong and
/// `dlopen` fails. An explicit search path makes the slot location irrelevant.
fn child_library_path() -> std::ffi::OsString {
    let mut dirs: Vec<std::ffi::OsString> = Vec::new();
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    if let Ok(out) = std::process::Command::new(rustc).args(["--print", "target-libdir"]).output()
        && out.status.success()
    {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !dir.is_empty() {
            dirs.push(dir.into());
        }
    }
    let mlir = std::env::var_os("MLIR_SYS_220_PREFIX").unwrap_or_else(|| "/usr/lib/llvm-22".into());
    dirs.push(std::path::Path::new(&mlir).join("lib").into_os_string());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        dirs.push(old);
    }
    let mut joined = std::ffi::OsString::new();
    for (i, d) in dirs.iter().enumerate() {
        if i > 0 {
            joined.push(":");
        }
        joined.push(d);
    }
    joined
}

/// State shared between a [`super::Session`] and its [`InterruptHandle`]s.
#[derive(Default)]
pub(crate) struct Shared {
    /// The current evaluation child (evcxr keeps the handle valid across its restarts; we
    /// replace it when we create a new context).
    pub child: Mutex<Option<Arc<Mutex<Child>>>>,
    /// Whether an execute is in progress.
    pub executing: AtomicBool,
    /// Whether the child is evaluating the user's cell (not start-up or prelude code):
    /// only then is it sent signals.
    pub in_cell: AtomicBool,
    /// When an interrupt was requested during the current execute.
    pub interrupt_at: Mutex<Option<Instant>>,
}

impl Shared {
    /// The pid of the live child, if any.
    pub fn child_pid(&self) -> Option<i32> {
        let slot = self.child.lock().unwrap_or_else(|e| e.into_inner());
        let handle = slot.as_ref()?;
        let mut child = handle.lock().unwrap_or_else(|e| e.into_inner());
        match child.try_wait() {
            Ok(None) => i32::try_from(child.id()).ok(),
            _ => None,
        }
    }

    /// Sends `signal` to the live child; false if there is none.
    pub fn signal_child(&self, signal: i32) -> bool {
        match self.child_pid() {
            // SAFETY: kill(2) with a pid we spawned and have not reaped.
            Some(pid) if pid > 0 => unsafe { libc::kill(pid, signal) == 0 },
            _ => false,
        }
    }
}

/// Interrupts the session's running cell from another thread (a Ctrl-C handler, the
/// kernel's interrupt request). Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct InterruptHandle {
    pub(crate) shared: Arc<Shared>,
}

impl InterruptHandle {
    /// Whether a cell is being executed (or waits for the session to start) now.
    pub fn executing(&self) -> bool {
        self.shared.executing.load(Ordering::SeqCst)
    }

    /// Asks the running cell to stop: sends SIGUSR2 to the evaluation child, where the
    /// engine turns it into an `Interrupted` error. If the cell is still running 2 s later,
    /// the session kills the child, restarts it and reports the lost variables. While an
    /// execute still waits for the session to start, it returns `Interrupted` at once
    /// (start-up goes on). Does nothing when no execute is in progress.
    pub fn interrupt(&self) {
        if !self.shared.executing.load(Ordering::SeqCst) {
            return;
        }
        {
            let mut at = self.shared.interrupt_at.lock().unwrap_or_else(|e| e.into_inner());
            if at.is_none() {
                *at = Some(Instant::now());
            }
        }
        if self.shared.in_cell.load(Ordering::SeqCst) {
            self.shared.signal_child(libc::SIGUSR2);
        }
    }
}
