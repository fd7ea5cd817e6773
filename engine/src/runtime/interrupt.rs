//! The interrupt flag: set by SIGUSR2 (sent by the front end on Ctrl-C / Jupyter
//! interrupt), polled by every engine wait. Taking the flag clears it, so one interrupt
//! stops one wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;

fn flag() -> &'static Arc<AtomicBool> {
    static F: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    F.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the SIGUSR2 handler that sets the flag (idempotent).
/// Errors if the handler cannot be registered.
pub fn install_handler() -> std::io::Result<()> {
    static DONE: OnceLock<()> = OnceLock::new();
    if DONE.get().is_some() {
        return Ok(());
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR2, flag().clone())?;
    let _ = DONE.set(());
    Ok(())
}

/// Sets the flag (what the signal handler does; also for tests).
pub fn request() {
    flag().store(true, Ordering::SeqCst);
}

/// Clears the flag (at the start of a cell, so a stale interrupt does not fire).
pub fn clear() {
    flag().store(false, Ordering::SeqCst);
}

/// Returns whether an interrupt was requested, clearing it.
pub fn take_if_set() -> bool {
    flag().swap(false, Ordering::SeqCst)
}

/// `Err(Interrupted)` when an interrupt was requested (clearing it), else `Ok`: polled
/// before each eager operation and each call of a jitted function outside a trace, so a
/// Rust loop of short engine calls stops at its next call (the cell fails, or panics for
/// an operator that cannot return the error; either way the session's variables are
/// kept). Costs one relaxed atomic load when no interrupt is pending.
pub fn check() -> crate::error::Result<()> {
    if flag().load(Ordering::Relaxed) && take_if_set() {
        return Err(crate::error::Error::interrupted());
    }
    Ok(())
}
