//! `jax.profiler`: host timelines of what the engine did (trace, lower, compile, execute
//! on each thread, transfers, user annotations, named scopes), written as Chrome Trace
//! Event Format JSON (`traceEvents`, `ph: "X"`, µs timestamps; Perfetto and
//! `chrome://tracing` open it) to `<log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz`,
//! the file layout JAX writes (JAX also writes an `.xplane.pb`, which needs XLA's protos:
//! not written here).
//!
//! Invariant: recording costs one relaxed atomic load when no profile is active
//! (`span` returns `None` at once), so the dispatch fast path is unchanged.

mod render;
mod scope;

pub use crate::runtime::memory::{device_memory_profile, memory_stats, save_device_memory_profile};
pub use render::{summary_table, svg_timeline};
pub use scope::{current_name_stack, named_scope, NamedScope};

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether a profile is being recorded (one relaxed load).
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// One complete event (`ph: "X"`) of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEvent {
    /// What ran: `PjitFunction(f)`, `jit(f)` (an execution), `trace jit(f)`, a user name, ...
    pub name: String,
    /// Category: `jit`, `trace`, `lower`, `compile`, `execute`, `transfer`, `user`, `scope`.
    pub cat: &'static str,
    /// Start in µs since the profile started.
    pub ts_us: f64,
    /// Duration in µs.
    pub dur_us: f64,
    /// Thread id (small integers in order of first appearance; see `Profile::threads`).
    pub tid: u64,
    /// Extra key/value pairs (`step_num`, `cache_hit`, bytes, ...).
    pub args: Vec<(String, String)>,
}

/// A recorded profile: its events and the threads they ran on.
///
/// Shown (`Display`, and `Debug` too, so a cell's value stays one line) as a summary:
/// `Profile(12 events on 2 threads, written to /tmp/prof/....trace.json.gz)`; the events
/// are in `events`.
#[derive(Clone, Default, PartialEq)]
pub struct Profile {
    pub events: Vec<TraceEvent>,
    /// `(tid, thread name)` of every thread with an event.
    pub threads: Vec<(u64, String)>,
    /// Where the trace file was written (`stop_trace`); `None` for an in-memory profile.
    pub path: Option<PathBuf>,
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (e, t) = (self.events.len(), self.threads.len());
        write!(f, "Profile({e} event{} on {t} thread{}", if e == 1 { "" } else { "s" }, if t == 1 { "" } else { "s" })?;
        match &self.path {
            Some(p) => write!(f, ", written to {})", p.display()),
            None => write!(f, ", in memory)"),
        }
    }
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

struct Session {
    start: Instant,
    log_dir: Option<PathBuf>,
    events: Vec<TraceEvent>,
}

fn session() -> &'static Mutex<Option<Session>> {
    static S: OnceLock<Mutex<Option<Session>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(None))
}

fn lock() -> std::sync::MutexGuard<'static, Option<Session>> {
    session().lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_names() -> &'static Mutex<Vec<(u64, String)>> {
    static T: OnceLock<Mutex<Vec<(u64, String)>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(Vec::new()))
}

thread_local! {
    static TID: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current().name().unwrap_or("thread").to_string();
        thread_names().lock().unwrap_or_else(|e| e.into_inner()).push((id, name));
        id
    };
}

fn tid() -> u64 {
    TID.with(|t| *t)
}

/// An event being timed; recorded when dropped (or `finish`ed with extra args).
#[must_use = "the span is recorded when dropped"]
pub struct Span {
    name: String,
    cat: &'static str,
    start: Instant,
    args: Vec<(String, String)>,
}

impl Span {
    /// Adds an argument shown with the event.
    pub fn arg(&mut self, key: &str, value: impl ToString) {
        self.args.push((key.to_string(), value.to_string()));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = Instant::now();
        let mut s = lock();
        if let Some(s) = s.as_mut() {
            let ts = self.start.saturating_duration_since(s.start).as_secs_f64() * 1e6;
            let dur = end.saturating_duration_since(self.start).as_secs_f64() * 1e6;
            s.events.push(TraceEvent {
                name: std::mem::take(&mut self.name),
                cat: self.cat,
                ts_us: ts,
                dur_us: dur,
                tid: tid(),
                args: std::mem::take(&mut self.args),
            });
        }
    }
}

/// Starts timing an event of category `cat` if a profile is active; `None` (at the cost
/// of one atomic load, `name` not built) otherwise.
#[inline]
pub fn span(cat: &'static str, name: impl FnOnce() -> String) -> Option<Span> {
    if !active() {
        return None;
    }
    Some(Span { name: name(), cat, start: Instant::now(), args: Vec::new() })
}

fn begin(log_dir: Option<PathBuf>) -> Result<()> {
    let mut s = lock();
    if s.is_some() {
        return Err(Error::runtime("Profile has already been started. Only one profile may be run at a time."));
    }
    *s = Some(Session { start: Instant::now(), log_dir, events: Vec::new() });
    ACTIVE.store(true, Ordering::Relaxed);
    Ok(())
}

fn end() -> Result<(Profile, Option<PathBuf>)> {
    // Work still in flight on the device worker belongs to this profile.
    let _ = crate::runtime::dispatch::barrier();
    let mut g = lock();
    let Some(s) = g.take() else {
        return Err(Error::runtime("No profile started"));
    };
    ACTIVE.store(false, Ordering::Relaxed);
    drop(g);
    let mut events = s.events;
    events.sort_by(|a, b| a.ts_us.total_cmp(&b.ts_us));
    let used: std::collections::BTreeSet<u64> = events.iter().map(|e| e.tid).collect();
    let threads = thread_names()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(t, _)| used.contains(t))
        .cloned()
        .collect();
    Ok((Profile { events, threads, path: None }, s.log_dir))
}

/// `jax.profiler.start_trace(log_dir)`: starts recording; `stop_trace` writes the trace.
/// Errors: a profile is already running (`RuntimeError`, JAX's message).
pub fn start_trace(log_dir: impl AsRef<Path>) -> Result<()> {
    begin(Some(log_dir.as_ref().to_path_buf()))
}

/// `jax.profiler.stop_trace()`: stops recording and writes
/// `<log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz`; returns the
/// profile with `path` set. Errors: no profile started; the file cannot be written.
pub fn stop_trace() -> Result<Profile> {
    let (mut p, dir) = end()?;
    if let Some(dir) = dir {
        p.path = Some(write_trace(&p, &dir)?);
    }
    Ok(p)
}

/// `with jax.profiler.trace(log_dir): f()`: runs `f` inside `start_trace`/`stop_trace`
/// and returns its value with the written profile. Errors: as `start_trace`/`stop_trace`.
pub fn trace<T>(log_dir: impl AsRef<Path>, f: impl FnOnce() -> T) -> Result<(T, Profile)> {
    start_trace(log_dir)?;
    let guard = EndOnUnwind;
    let v = f();
    std::mem::forget(guard);
    Ok((v, stop_trace()?))
}

/// Ends the profile if the profiled code panics (a caught panic in a cell must not leave
/// a profile running that no one can stop).
struct EndOnUnwind;
impl Drop for EndOnUnwind {
    fn drop(&mut self) {
        let mut g = lock();
        *g = None;
        ACTIVE.store(false, Ordering::Relaxed);
    }
}

/// Records `f` into an in-memory profile (no file): what `%profile CALL` shows.
/// Errors: a profile is already running.
pub fn profile<T>(f: impl FnOnce() -> T) -> Result<(T, Profile)> {
    begin(None)?;
    let guard = EndOnUnwind;
    let v = f();
    std::mem::forget(guard);
    Ok((v, end()?.0))
}

/// `jax.profiler.TraceAnnotation(name)`: a user-named span on the timeline while the
/// value lives (`let _t = TraceAnnotation::new("step");`). Free when no profile runs.
pub struct TraceAnnotation(#[allow(dead_code)] Option<Span>);

impl TraceAnnotation {
    pub fn new(name: &str) -> TraceAnnotation {
        TraceAnnotation(span("user", || name.to_string()))
    }
    /// Adds key/value pairs to the event (JAX's `**kwargs`).
    pub fn with_arg(mut self, key: &str, value: impl ToString) -> TraceAnnotation {
        if let Some(s) = self.0.as_mut() {
            s.arg(key, value);
        }
        self
    }
}

/// `jax.profiler.StepTraceAnnotation(name, step_num=n)`: a TraceAnnotation with a step number.
pub fn step_trace_annotation(name: &str, step_num: u64) -> TraceAnnotation {
    TraceAnnotation::new(name).with_arg("step_num", step_num)
}

/// `jax.profiler.annotate_function`: runs `f` inside a TraceAnnotation named `name`.
pub fn annotate_function<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let _t = TraceAnnotation::new(name);
    f()
}

/// The Chrome trace JSON of `p` (`{"displayTimeUnit": "ns", "traceEvents": [...]}`):
/// thread-name metadata events, then one `"X"` event per span.
pub fn chrome_trace_json(p: &Profile) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    let pid = std::process::id();
    let mut evs: Vec<Value> = vec![json!({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "/host:CPU"}})];
    for (t, n) in &p.threads {
        evs.push(json!({"ph": "M", "pid": pid, "tid": t, "name": "thread_name", "args": {"name": n}}));
    }
    for e in &p.events {
        let args: Map<String, Value> = e.args.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        evs.push(json!({
            "ph": "X", "pid": pid, "tid": e.tid, "name": e.name, "cat": e.cat,
            "ts": (e.ts_us * 1000.0).round() / 1000.0, "dur": (e.dur_us * 1000.0).round() / 1000.0, "args": args,
        }));
    }
    json!({"displayTimeUnit": "ns", "traceEvents": evs})
}

fn write_trace(p: &Profile, log_dir: &Path) -> Result<PathBuf> {
    let io = |what: &str, path: &Path, e: std::io::Error| Error::runtime(format!("cannot {what} {}: {e}", path.display()));
    let run = log_dir.join("plugins").join("profile").join(run_name(SystemTime::now()));
    std::fs::create_dir_all(&run).map_err(|e| io("create", &run, e))?;
    let path = run.join(format!("{}.trace.json.gz", hostname()));
    let f = std::fs::File::create(&path).map_err(|e| io("create", &path, e))?;
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    serde_json::to_writer(&mut gz, &chrome_trace_json(p)).map_err(|e| Error::runtime(format!("cannot write the trace: {e}")))?;
    gz.finish().and_then(|mut f| f.flush()).map_err(|e| io("write", &path, e))?;
    Ok(path)
}

/// The machine's host name (as JAX names the trace file), `localhost` if unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// `YYYY_MM_DD_HH_MM_SS` (UTC) of `t`: the run directory's name.
pub fn run_name(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}_{m:02}_{d:02}_{:02}_{:02}_{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_utc_timestamps() {
        assert_eq!(run_name(UNIX_EPOCH), "1970_01_01_00_00_00");
        // 2024-02-29 12:34:56 UTC (a leap day).
        assert_eq!(run_name(UNIX_EPOCH + std::time::Duration::from_secs(1_709_210_096)), "2024_02_29_12_34_56");
    }
}
