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
    /// The persistent compilation cache's verdict on an executable cache miss (reported
    /// with `Verdict::current`: a background write's outcome shows once it is known).
    pub persistent: Option<crate::compile::persistent::Verdict>,
    /// For a call that ran partitioned (sharded arguments, `shard_map`): which path each
    /// control-flow equation took and why (`partition/loops.rs`); empty otherwise.
    pub partition: Vec<String>,
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

/// A one-line summary of a trace-miss reason (the full `jax_explain_cache_misses` text
/// follows the verdict line, indented).
pub fn short_reason(reason: &str) -> String {
    if reason.contains("never seen function") {
        let mut s = "never seen function".to_string();
        if reason.contains("re-defined repeatedly") {
            s.push_str("; another function was defined on the same line: re-defined in a loop? define it once outside");
        }
        return s;
    }
    let mut kind = String::new();
    let mut items = vec![];
    for line in reason.lines().skip(1).map(str::trim) {
        if let Some(item) = line.strip_prefix("* ") {
            items.push(item.to_string());
        } else if line.ends_with(':') && !line.starts_with("all previously") {
            kind = line.trim_end_matches(':').to_string();
        }
    }
    match (kind.is_empty(), items.is_empty()) {
        (_, true) => reason.lines().nth(1).unwrap_or("").trim().to_string(),
        (true, false) => items.join("; "),
        (false, false) => format!("{kind}: {}", items.join("; ")),
    }
}

/// One verdict line per event, every layer with its reason and cost:
/// `f at cell:3  trace: miss (never seen function), 1.20 ms | executable: miss, lowered+compiled in 30.1 ms | persistent: off (...)`,
/// then the full miss explanation, indented. The persistent layer (consulted only on an
/// executable cache miss) shows its verdict: `off (...)`, `hit (...)` or
/// `miss (...); written ...`/`not written: ...`.
pub fn report(events: &[Event]) -> String {
    if events.is_empty() {
        return "No cache misses recorded yet: every call so far hit the trace and executable caches.".into();
    }
    let mut s = String::new();
    for e in events {
        let trace = if e.trace_miss {
            let why = e.reason.as_deref().map(short_reason).unwrap_or_else(|| "not explained".into());
            format!("miss ({why}), traced in {:.2} ms", e.trace_secs * 1e3)
        } else {
            "hit".into()
        };
        let exe = if e.executable_hit {
            "hit (identical module compiled before), 0 ms".to_string()
        } else {
            format!("miss (new lowered module), lowered+compiled in {:.2} ms", e.compile_secs * 1e3)
        };
        let persistent = match (&e.persistent, e.executable_hit) {
            (_, true) => "not consulted".to_string(),
            (Some(v), false) => v.current(),
            (None, false) => "off (jax_compilation_cache_dir is not set)".to_string(),
        };
        s.push_str(&format!(
            "{} at {}  trace: {trace} | executable: {exe} | persistent: {persistent}\n",
            e.function, e.call_site.line_label()
        ));
        for n in &e.partition {
            s.push_str(&format!("    partitioned: {n}\n"));
        }
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
