//! Progress of long compiles, for interactive sessions.
//!
//! A compile that runs longer than [`SHOW_AFTER`] is announced, then updated every
//! [`UPDATE_EVERY`], and finished with its total time, so that a learner sees that work is
//! happening instead of a silent cell. Off by default (tests and the bench print nothing);
//! the session's prelude turns it on through [`crate::interactive::init_session`].
//!
//! Wire format (the session reads it from the evaluation child's stderr and turns it into a
//! progress output; nothing else prints it): one line per event,
//! `\x1ejaxrepl-progress {"id":N,"text":"…","done":false}`, where `\x1e` is ASCII RS,
//! `id` names one compile and `done` is true on its last line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a compile runs before it is announced (1 s), unless `JAXREPL_PROGRESS_AFTER_MS`
/// sets another delay in milliseconds (tests use 0).
pub const SHOW_AFTER: Duration = Duration::from_secs(1);
/// How often a shown compile's elapsed time is updated (0.5 s).
pub const UPDATE_EVERY: Duration = Duration::from_millis(500);
/// The prefix of a progress line on stderr (ASCII RS, then the tag and a space).
pub const LINE_PREFIX: &str = "\x1ejaxrepl-progress ";

static ENABLED: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Delay in ms set by [`set_show_after`]; `u64::MAX` = not set.
static AFTER_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// The delay before a compile is announced: the last [`set_show_after`], else
/// `JAXREPL_PROGRESS_AFTER_MS`, else [`SHOW_AFTER`].
pub fn show_after() -> Duration {
    let ms = AFTER_MS.load(Ordering::Relaxed);
    if ms != u64::MAX {
        return Duration::from_millis(ms);
    }
    std::env::var("JAXREPL_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(SHOW_AFTER, Duration::from_millis)
}

/// Sets the delay before a compile is announced for this process (milliseconds are kept).
pub fn set_show_after(delay: Duration) {
    AFTER_MS.store((delay.as_millis() as u64).min(u64::MAX - 1), Ordering::Relaxed);
}

/// Turns progress lines on or off for this process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether progress lines are printed.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// One compile being watched. Call [`Watch::tick`] while waiting for it and drop it when it
/// ends: the drop prints the final line if anything was shown.
pub struct Watch {
    id: u64,
    what: String,
    started: Instant,
    last_shown: Option<Instant>,
}

impl Watch {
    /// Starts watching a compile described by `what` (e.g. `jit(f)`).
    pub fn start(what: &str) -> Watch {
        Watch { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), what: what.to_string(), started: Instant::now(), last_shown: None }
    }

    /// Prints an update if the compile has run longer than [`show_after`] and the last
    /// update is older than [`UPDATE_EVERY`]. Cheap to call every few milliseconds.
    pub fn tick(&mut self) {
        if !enabled() {
            return;
        }
        let elapsed = self.started.elapsed();
        if elapsed < show_after() || self.last_shown.is_some_and(|t| t.elapsed() < UPDATE_EVERY) {
            return;
        }
        self.last_shown = Some(Instant::now());
        emit(self.id, &format!("compiling {} (MLIR → LLVM → native): {:.1} s", self.what, elapsed.as_secs_f64()), false);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.last_shown.is_some() && enabled() {
            emit(self.id, &format!("compiled {} in {:.1} s", self.what, self.started.elapsed().as_secs_f64()), true);
        }
    }
}

/// The progress line for one event (see the module doc for the format).
pub fn line(id: u64, text: &str, done: bool) -> String {
    format!("{LINE_PREFIX}{{\"id\":{id},\"text\":{},\"done\":{done}}}", crate::interactive::json_string(text))
}

fn emit(id: u64, text: &str, done: bool) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{}", line(id, text, done));
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format_is_json_after_the_prefix() {
        let l = line(7, "compiling jit(f) \"x\"", false);
        assert!(l.starts_with("\x1ejaxrepl-progress {"));
        assert_eq!(&l[LINE_PREFIX.len()..], r#"{"id":7,"text":"compiling jit(f) \"x\"","done":false}"#);
    }

    #[test]
    fn a_short_compile_shows_nothing() {
        // Disabled (the default outside sessions), nothing is shown, so the drop prints nothing.
        let mut w = Watch::start("jit(f)");
        w.tick();
        assert!(w.last_shown.is_none());
    }
}
