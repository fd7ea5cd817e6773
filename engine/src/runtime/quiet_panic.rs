//! `catch_quietly`: `catch_unwind` without the panic hook's report, for code whose panic
//! becomes an error value that carries the panic's message (a host callback's panic is the
//! callback's error; printing the panic too would report it twice).
//!
//! The hook is swapped for a forwarding one only while some thread is inside
//! `catch_quietly` (a process-wide count under a mutex: the first to enter installs it, the
//! last to leave restores the previous hook), and it silences only the threads inside:
//! panics of every other thread still reach the previous hook (the session's, libtest's).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, PanicHookInfo};
use std::sync::{Arc, Mutex};

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Send + Sync + 'static>;

thread_local! {
    /// How deep this thread is in `catch_quietly` (callbacks can nest).
    static QUIET: Cell<usize> = const { Cell::new(0) };
}

/// Threads inside `catch_quietly`, and the hook to restore when the last one leaves.
static STATE: Mutex<(usize, Option<Arc<Hook>>)> = Mutex::new((0, None));

fn enter() {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if s.0 == 0 {
        let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
        let forward = previous.clone();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) == 0 {
                forward(info);
            }
        }));
        s.1 = Some(previous);
    }
    s.0 += 1;
}

fn leave() {
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    s.0 -= 1;
    if s.0 == 0 {
        if let Some(previous) = s.1.take() {
            drop(std::panic::take_hook());
            match Arc::try_unwrap(previous) {
                Ok(hook) => std::panic::set_hook(hook),
                // Another thread is still running our hook's copy: chain to it.
                Err(shared) => std::panic::set_hook(Box::new(move |info| shared(info))),
            }
        }
    }
}

/// Runs `f`, catching a panic without the panic hook reporting it (for this thread only):
/// `Err(payload)` as `std::panic::catch_unwind` gives it. Called while this thread is
/// already panicking (no hook can be swapped then), it is a plain `catch_unwind`.
pub fn catch_quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    if std::thread::panicking() {
        return std::panic::catch_unwind(AssertUnwindSafe(f));
    }
    enter();
    QUIET.with(|q| q.set(q.get() + 1));
    let r = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    leave();
    r
}

/// The message of a panic payload (`panic!("..")` with or without format arguments).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into())
}
