//! The session behind the kernel, and the thread that owns it.
//!
//! [`Backend`] is the small surface the kernel needs; `jaxrepl::Session` implements it
//! below and is the only production implementation (tests may plug in a fake). The
//! [`Worker`] thread starts the session and runs every call on it, one at a time, under
//! `catch_unwind`: the async runtime never blocks on evaluation (so control stays
//! responsive during a long cell), the session need not be `Send`, and a panic in the
//! session becomes an error reply instead of a dead kernel.

use jaxrepl::{Completeness, Completions, ExecStatus, Output};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A thread-safe way to interrupt the running cell, handed out by the session.
pub type Interrupter = Arc<dyn Fn() + Send + Sync>;

/// What the kernel asks of a session. Offsets are bytes of UTF-8, as the session uses.
pub trait Backend {
    /// Evaluates one cell, reporting outputs through `sink` in order as they happen.
    fn execute(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> ExecStatus;
    /// `execute`, with `input` answering the cell's requests for a line of input (the
    /// prompt in, the line or `None` out). Sessions without input ignore it.
    fn execute_with_input(
        &mut self,
        code: &str,
        sink: &mut dyn FnMut(Output),
        input: &mut dyn FnMut(&str) -> Option<String>,
    ) -> ExecStatus {
        let _ = input;
        self.execute(code, sink)
    }
    /// The execution count the front end shows for the next cell (`In [N]`); sessions
    /// that name engine locations by cell (`cell N, line L`) use it.
    fn set_execution_count(&mut self, n: u64) {
        let _ = n;
    }
    /// Whether `code` is a complete cell, needs more lines, or can never be valid.
    fn is_complete(&self, code: &str) -> Completeness;
    /// Completions at byte offset `cursor`.
    fn complete(&mut self, code: &str, cursor: usize) -> Completions;
    /// Plain-text help for what is under byte offset `cursor`, if any.
    fn inspect(&mut self, code: &str, cursor: usize) -> Option<String>;
    /// A handle that interrupts the running cell from another thread.
    fn interrupter(&self) -> Interrupter;
}

impl Backend for jaxrepl::Session {
    fn execute(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> ExecStatus {
        jaxrepl::Session::execute(self, code, sink)
    }
    fn execute_with_input(
        &mut self,
        code: &str,
        sink: &mut dyn FnMut(Output),
        input: &mut dyn FnMut(&str) -> Option<String>,
    ) -> ExecStatus {
        jaxrepl::Session::execute_with_input(self, code, sink, input)
    }
    fn set_execution_count(&mut self, n: u64) {
        jaxrepl::Session::set_execution_count(self, n)
    }
    fn is_complete(&self, code: &str) -> Completeness {
        jaxrepl::Session::is_complete(self, code)
    }
    fn complete(&mut self, code: &str, cursor: usize) -> Completions {
        jaxrepl::Session::complete(self, code, cursor)
    }
    fn inspect(&mut self, code: &str, cursor: usize) -> Option<String> {
        jaxrepl::Session::inspect(self, code, cursor)
    }
    fn interrupter(&self) -> Interrupter {
        let handle = self.interrupt_handle();
        Arc::new(move || handle.interrupt())
    }
}

/// Why a call on the worker produced no value.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The session never started (the message says why), or was shut down.
    Unavailable(String),
    /// The session panicked during the call; the message is the panic's.
    Panicked(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unavailable(why) => write!(f, "the session is not available: {why}"),
            CallError::Panicked(msg) => write!(f, "the session panicked: {msg}"),
        }
    }
}

type State<B> = Result<B, String>;
type Job<B> = Box<dyn FnOnce(&mut State<B>) + Send>;

/// Owner of the session: a dedicated thread that runs calls in arrival order.
pub struct Worker<B> {
    jobs: std::sync::mpsc::Sender<Job<B>>,
    interrupter: Arc<Mutex<Option<Interrupter>>>,
}

impl<B> Clone for Worker<B> {
    fn clone(&self) -> Self {
        Worker { jobs: self.jobs.clone(), interrupter: self.interrupter.clone() }
    }
}

impl<B: Backend + 'static> Worker<B> {
    /// Spawns the worker thread, which starts the session with `start` (a slow step: the
    /// kernel answers `kernel_info` meanwhile; calls queue behind it).
    pub fn spawn(start: impl FnOnce() -> anyhow::Result<B> + Send + 'static) -> Worker<B> {
        let (jobs, rx) = std::sync::mpsc::channel::<Job<B>>();
        let interrupter: Arc<Mutex<Option<Interrupter>>> = Arc::default();
        let slot = interrupter.clone();
        std::thread::Builder::new()
            .name("jaxrepl-session".into())
            .spawn(move || {
                let mut state: State<B> = match catch_unwind(AssertUnwindSafe(start)) {
                    Ok(Ok(b)) => Ok(b),
                    Ok(Err(e)) => Err(format!("{e:#}")),
                    Err(p) => Err(format!("panicked while starting: {}", panic_message(&*p))),
                };
                match &state {
                    Ok(b) => *lock(&slot) = Some(b.interrupter()),
                    Err(e) => eprintln!("jaxrepl-kernel: the session failed to start: {e}"),
                }
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
            })
            .expect("spawning the session thread");
        Worker { jobs, interrupter }
    }

    /// Runs `f` on the session thread and waits (asynchronously) for its value.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut B) -> T + Send + 'static,
    ) -> Result<T, CallError> {
        let (tx, rx) = oneshot::channel();
        let job: Job<B> = Box::new(move |state| {
            let result = match state {
                Ok(b) => catch_unwind(AssertUnwindSafe(|| f(b)))
                    .map_err(|p| CallError::Panicked(panic_message(&*p))),
                Err(why) => Err(CallError::Unavailable(why.clone())),
            };
            let _ = tx.send(result);
        });
        if self.jobs.send(job).is_err() {
            return Err(CallError::Unavailable("the session thread has stopped".into()));
        }
        rx.await.unwrap_or_else(|_| Err(CallError::Unavailable("the session thread has stopped".into())))
    }

    /// Interrupts the running cell, if the session has started; otherwise does nothing.
    pub fn interrupt(&self) {
        let interrupter = lock(&self.interrupter).clone();
        if let Some(interrupt) = interrupter {
            interrupt();
        }
    }

    /// Drops the session (ending its evaluation child) once the current call is done.
    /// Returns when it is dropped, or after `timeout` if a cell will not finish.
    pub async fn shut_down(&self, timeout: std::time::Duration) {
        let (tx, rx) = oneshot::channel::<()>();
        let job: Job<B> = Box::new(move |state| {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                *state = Err("the kernel is shutting down".into());
            }));
            let _ = tx.send(());
        });
        if self.jobs.send(job).is_ok() {
            let _ = tokio::time::timeout(timeout, rx).await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The text of a panic payload (`&str` or `String`; anything else is described).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".into()
    }
}
