//! Cache-miss records for `%explain`: for each call that missed a cache layer, what
//! each layer decided (trace, executable) and what it cost.

use crate::ir::SourceInfo;
use std::cell::RefCell;
use std::sync::{Mutex, OnceLock};

/// One call that traced or compiled.
#[derive(Clone, Debug)]
pub struct Event {
    pub function: String,
    pub call_site: SourceInfo,
    /// The trace cache missed (the function was traced).
    pub trace_miss: bool,
    /// Seconds spent tracing.
    pub trace_secs: f64,
    /// The executable cache hit (an identical lowered module was compiled before).
    pub executable_hit: bool,
    /// Seconds spent lowering and compiling.
    pub compile_secs: f64,
    /// Why the trace cache missed (the `jax_explain_cache_misses` text).
    pub reason: Option<String>,
}

const KEEP: usize = 20;

fn events() -> &'static Mutex<Vec<Event>> {
    static E: OnceLock<Mutex<Vec<Event>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(Vec::new()))
}

thread_local! {
    static PENDING: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Remembers the miss reason for the next recorded event of this thread.
pub fn set_pending_reason(r: String) {
    PENDING.with(|p| *p.borrow_mut() = Some(r));
}

/// Records an event (keeps the last 20).
pub fn record(mut e: Event) {
    if e.reason.is_none() && e.trace_miss {
        e.reason = PENDING.with(|p| p.borrow_mut().take());
    }
    let mut v = events().lock().unwrap_or_else(|e| e.into_inner());
    v.push(e);
    let n = v.len();
    if n > KEEP {
        v.drain(..n - KEEP);
    }
}

/// The recorded events, oldest first.
pub fn recent() -> Vec<Event> {
    events().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Forgets the recorded events.
pub fn clear() {
    events().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// One line per event and layer: `f  trace: miss (...) 1.2 ms | executable: hit`.
pub fn report(events: &[Event]) -> String {
    if events.is_empty() {
        return "No cache misses recorded yet: every call so far hit the trace and executable caches.".into();
    }
    let mut s = String::new();
    for e in events {
        let trace = if e.trace_miss { format!("miss, traced in {:.2} ms", e.trace_secs * 1e3) } else { "hit".into() };
        let exe = if e.executable_hit {
            "hit (identical module compiled before)".to_string()
        } else {
            format!("miss, lowered+compiled in {:.2} ms", e.compile_secs * 1e3)
        };
        s.push_str(&format!(
            "{} at {}:{}  trace: {trace} | executable: {exe}\n",
            e.function, e.call_site.file, e.call_site.line
        ));
        if let Some(r) = &e.reason {
            for line in r.lines() {
                s.push_str("    ");
                s.push_str(line);
                s.push('\n');
            }
        }
    }
    s
}
