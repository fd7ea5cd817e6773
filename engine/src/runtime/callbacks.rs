//! Host callbacks called from compiled code (`debug::print`, later `pure_callback` and
//! `io_callback`): a registry from `CallbackId` to a Rust closure over host buffers.
//!
//! Invariant: a callback never unwinds into compiled code; a panic or error inside it is
//! caught here and reported on stderr of the cell that ran it.

use super::buffer::Buffer;
use crate::ir::CallbackId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A host callback: receives the operand values, in order.
pub type HostCallback = Arc<dyn Fn(&[Buffer]) + Send + Sync>;

fn registry() -> &'static Mutex<HashMap<CallbackId, HostCallback>> {
    static R: OnceLock<Mutex<HashMap<CallbackId, HostCallback>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Registers `f` and returns its id (ids are never reused in a process).
pub fn register(f: HostCallback) -> CallbackId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    registry().lock().unwrap_or_else(|e| e.into_inner()).insert(id, f);
    id
}

/// Calls callback `id` with `args` (called by compiled code through the runtime
/// symbols). Unknown ids and panics are reported on stderr, never propagated.
pub fn fire(id: CallbackId, args: Vec<Buffer>) {
    let f = registry().lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
    match f {
        Some(f) => {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&args))).is_err() {
                eprintln!("jax: host callback {id} panicked");
            }
        }
        None => eprintln!("jax: unknown host callback {id}"),
    }
}
