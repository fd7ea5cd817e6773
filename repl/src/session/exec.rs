//! Running cells: starting the child (context, panic hook, prelude), the execute loop that
//! streams output and watches for interrupts, child-death recovery, and the
//! completion/inspection helpers.

use super::bindings;
use super::child::{self, Ctx, Shared};
use super::complete::{KEYWORDS, PRELUDE_NAMES, clamp_to_boundary, word_at, word_before};
use super::magic::{self, MAGICS, Rewrite};
use super::qmark;
use super::render;
use super::slots::Slot;
use super::{Completions, ExecStatus, Output, Session, SessionOptions, Started, State};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// How long an interrupted cell may keep running before the child is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// How long the session waits for the next line of a burst of stdout before sending what
/// it has as one output: the child's reader thread hands lines over one by one, and on a
/// busy machine the lines of one `println!` arrived a few at a time.
const STDOUT_GATHER: Duration = Duration::from_millis(3);

/// Creates the context in `slot` and runs the set-up code; used by the start-up thread and
/// for restarts.
pub(super) fn start_child(opts: &SessionOptions, slot: &Slot, shared: &Shared) -> Started {
    let timing = std::env::var_os("JAXREPL_TIMING").is_some();
    let t0 = Instant::now();
    let seeded = if opts.prelude { slot.seed(&opts.engine_path) } else { None };
    if timing && let Some(donor) = &seeded {
        eprintln!("[timing] slot {}: seeded from {} in {:.1} s", slot.index(), donor.display(), t0.elapsed().as_secs_f64());
    }
    let t0 = Instant::now();
    let mut ctx = match child::create_context(slot, opts.work_dir.as_deref()) {
        Ok(ctx) => ctx,
        Err(e) => {
            return Started { ctx: Err(e), notes: Vec::new() };
        }
    };
    *shared.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(ctx.cmd.process_handle());
    let t1 = Instant::now();
    let notes = run_setup(&mut ctx, opts);
    if timing {
        eprintln!(
            "[timing] slot {}: evaluation context {:.1} s, set-up (prelude: {}) {:.1} s",
            slot.index(),
            (t1 - t0).as_secs_f64(),
            opts.prelude,
            t1.elapsed().as_secs_f64()
        );
    }
    Started { ctx: Ok(ctx), notes }
}

/// Evaluates the prelude (if enabled) and our panic hook in a fresh child. Returns error
/// outputs to show the user; an empty list means all went well.
fn run_setup(ctx: &mut Ctx, opts: &SessionOptions) -> Vec<Output> {
    let hook = child::panic_hook_code(false);
    ctx.engine = false;
    let mut notes = Vec::new();
    ctx.stop_hook = false;
    if opts.prelude {
        if !opts.engine_path.join("Cargo.toml").is_file() {
            notes.push(render::simple_error(
                "PreludeError",
                format!(
                    "the engine crate was not found at {} (set JAXREPL_ENGINE_DIR); continuing without the engine",
                    opts.engine_path.display()
                ),
            ));
        } else {
            let code = format!(
                "{}\n{}\n{}\n{}",
                qmark::ERROR_FORMAT_COMMAND,
                child::prelude_code(&opts.engine_path),
                child::panic_hook_code(true),
                qmark::ENABLE_QUESTION_MARK
            );
            match eval_quiet(ctx, &code) {
                Ok(()) => {
                    ctx.engine = true;
                    ctx.stop_hook = true;
                    return notes;
                }
                Err(msg) => notes.push(render::simple_error(
                    "PreludeError",
                    format!("the engine prelude failed; continuing without the engine:\n{msg}"),
                )),
            }
        }
    }
    match eval_quiet(ctx, &format!("{hook}\n{}", qmark::ENABLE_QUESTION_MARK)) {
        Ok(()) => ctx.stop_hook = true,
        Err(msg) => notes.push(render::simple_error("SetupError", format!("installing the panic hook failed:\n{msg}"))),
    }
    notes
}

/// Evaluates set-up code, discarding its output; on failure returns the error text with
/// the child's stderr.
fn eval_quiet(ctx: &mut Ctx, code: &str) -> Result<(), String> {
    let result = catch_unwind(AssertUnwindSafe(|| ctx.cmd.execute(code)));
    let mut stderr = String::new();
    while let Ok(line) = ctx.outputs.stderr.try_recv() {
        stderr.push_str(&line);
        stderr.push('\n');
    }
    while ctx.outputs.stdout.try_recv().is_ok() {}
    match result {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(evcxr::Error::CompilationErrors(errors))) => {
            let mut text = String::new();
            for e in &errors {
                let rendered = e.rendered();
                text.push_str(&if rendered.is_empty() { e.message() } else { rendered });
                text.push('\n');
            }
            Err(format!("{stderr}{text}"))
        }
        Ok(Err(e)) => Err(format!("{stderr}{e}")),
        Err(_) => Err(format!("{stderr}evcxr panicked")),
    }
}

impl Session {
    /// Waits for the start-up thread (polling the interrupt flag when `interruptible`),
    /// moving its result into `self.state` and its notes into `self.notes`. Returns false
    /// if interrupted while waiting.
    pub(super) fn finish_start(&mut self, interruptible: Option<&Shared>) -> bool {
        if let State::Starting(handle) = &self.state {
            while !handle.is_finished() {
                if let Some(shared) = interruptible
                    && shared.interrupt_at.lock().unwrap_or_else(|e| e.into_inner()).is_some()
                {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let State::Starting(_) = self.state {
            let State::Starting(handle) = std::mem::replace(&mut self.state, State::Failed(String::new())) else {
                unreachable!()
            };
            match handle.join() {
                Ok(Started { ctx: Ok(ctx), notes }) => {
                    self.state = State::Ready(Box::new(ctx));
                    self.notes.extend(notes);
                }
                Ok(Started { ctx: Err(e), notes }) => {
                    self.state = State::Failed(format!("{e:#}"));
                    self.notes.extend(notes);
                }
                Err(_) => self.state = State::Failed("the start-up thread panicked".into()),
            }
        }
        true
    }

    pub(super) fn execute_inner(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> ExecStatus {
        let shared = self.shared.clone();
        if !self.finish_start(Some(&shared)) {
            sink(render::simple_error(
                "Interrupted",
                "interrupted while the session was still starting (it keeps starting in the background)",
            ));
            return ExecStatus::Interrupted;
        }
        let mut failed = false;
        for note in self.notes.drain(..) {
            failed = true;
            sink(note);
        }
        if let State::Failed(msg) = &self.state {
            if !msg.is_empty() {
                sink(render::simple_error("SessionError", format!("{msg}\nTrying to start a new evaluation context...")));
            }
            let started = start_child(&self.opts, &self.slot, &self.shared);
            for note in started.notes {
                sink(note);
            }
            match started.ctx {
                Ok(ctx) => self.state = State::Ready(Box::new(ctx)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    sink(render::simple_error("SessionError", msg.clone()));
                    self.state = State::Failed(msg);
                    return ExecStatus::Error;
                }
            }
        }
        // Rust after a magic's argument runs as its own evaluation once the magic has run
        // (its output shown first), with the cell's number and line numbers; a later magic
        // in those lines runs the same way (IPython runs every line magic of a cell).
        let label = self.execution_count.unwrap_or(self.cells_run + 1);
        let mut part = code.to_string();
        while let Some(at) = magic::split_after_magic(&part) {
            let first = self.execute_magic(&part[..at], sink);
            if first != ExecStatus::Ok {
                return if failed { ExecStatus::Error } else { first };
            }
            self.execution_count = Some(label);
            // Blank lines in place of the lines already run keep the line numbers.
            part = format!("{}{}", "\n".repeat(part[..at].matches('\n').count()), &part[at..]);
        }
        let status = self.execute_magic(&part, sink);
        if failed && status == ExecStatus::Ok { ExecStatus::Error } else { status }
    }

    /// Rewrites a magic in `code` (if any) and runs the result.
    fn execute_magic(&mut self, code: &str, sink: &mut dyn FnMut(Output)) -> ExecStatus {
        let user_code = code;
        let (rewrite, magic_columns) = magic::rewrite_mapped(code);
        let code = match rewrite {
            Rewrite::NotMagic => code.to_string(),
            Rewrite::Error(msg) => {
                sink(render::simple_error("MagicError", msg));
                return ExecStatus::Error;
            }
            Rewrite::Code(c) if !self.opts.prelude && c.trim() == "jax::magic::help().evcxr_display();" => {
                sink(Output::Display(vec![("text/plain".into(), magic::help_text())]));
                return ExecStatus::Ok;
            }
            Rewrite::Code(c) => c,
        };
        self.run_cell(&code, user_code, magic_columns, sink)
    }

    /// Evaluates `code` in the ready context, streaming outputs, and handles the result.
    /// `user_code` is the cell as the user wrote it (`code` with its magic rewritten;
    /// `magic` says where the magic's argument moved), used to show compile errors.
    fn run_cell(
        &mut self,
        code: &str,
        user_code: &str,
        magic: Option<magic::MagicColumns>,
        sink: &mut dyn FnMut(Output),
    ) -> ExecStatus {
        self.cells_run += 1;
        let cell_number = self.cells_run;
        // Whether the cell wrote to stderr (where evcxr prints the error of a `?` that
        // stopped the cell).
        let saw_stderr = std::cell::Cell::new(false);
        let mut watched = |o: Output| {
            if matches!(o, Output::Stderr(_)) {
                saw_stderr.set(true);
            }
            sink(o)
        };
        let sink: &mut dyn FnMut(Output) = &mut watched;
        let State::Ready(ctx) = &mut self.state else {
            return ExecStatus::Error;
        };
        let vars_before = self.vars.clone();
        let label = self.execution_count.take().unwrap_or(cell_number);
        // The earlier values of the names this cell binds again, kept aside at its start
        // so that a failure does not lose them (`bindings::rebound`).
        let earlier: Vec<&str> = vars_before.iter().map(|(n, _)| n.as_str()).collect();
        let keep = if ctx.engine { bindings::keep_code(&bindings::rebound(code, &earlier)) } else { String::new() };
        let located = located_code(ctx, &self.slot, label, code, &keep);
        // Sorts the child's stderr: `?` errors, the stack-overflow line, `dbg!` locations, text.
        let lib_rs = self.slot.dir().join("src").join("lib.rs");
        let mut router = qmark::StderrRouter::new(label, code).with_generated(lib_rs);
        let inserted = located.as_ref().map(|(_, at)| *at);
        let rewritten = code;
        let code = located.as_ref().map_or(code, |(c, _)| c.as_str());
        let shared = self.shared.clone();
        let cell_pid = shared.child_pid();
        shared.in_cell.store(true, std::sync::atomic::Ordering::SeqCst);
        let worker_clock = WorkerClock::default();
        let result = std::thread::scope(|scope| {
            let cmd = &mut ctx.cmd;
            let clock = &worker_clock;
            let worker = scope.spawn(move || {
                clock.record_current_thread();
                catch_unwind(AssertUnwindSafe(|| cmd.execute(code)))
            });
            let mut worker_cpu = WorkerCpu::new(&worker_clock);
            let outs = &ctx.outputs;
            let mut killed = false;
            let mut last_probe: Option<Instant> = None;
            let mut grace_from: Option<Instant> = None;
            let mut cell_build = CellBuildProgress::new(cell_number);
            loop {
                let mut idle = true;
                if let Ok(line) = outs.stdout.try_recv() {
                    // Output from the evaluation child means the build is over: the build's
                    // progress display ends before the cell's first output, so a front end
                    // can remove it (Jupyter: clear_output) instead of leaving it emptied
                    // above that output.
                    cell_build.finish(sink);
                    send_stdout(line, || outs.stdout.recv_timeout(STDOUT_GATHER).ok(), sink);
                    idle = false;
                }
                while let Ok(line) = outs.stderr.try_recv() {
                    cell_build.finish(sink);
                    router.route(line, sink);
                    idle = false;
                }
                if worker.is_finished() {
                    break;
                }
                worker_cpu.busy(); // samples the worker's CPU time every 100 ms
                cell_build.poll(sink, &mut worker_cpu);
                let asked = *shared.interrupt_at.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(at) = asked
                    && !killed
                {
                    // The grace period counts only while the cell runs: while evcxr still
                    // compiles it, the child is idle and the engine will see the flag as
                    // soon as the cell starts.
                    if last_probe.is_none_or(|t: Instant| t.elapsed() >= Duration::from_millis(100)) {
                        last_probe = Some(Instant::now());
                        // Still preparing the cell in this process (evcxr's rust-analyzer
                        // pass, its first time over the engine's crates can take minutes)
                        // or building it: the child is not running the cell, and killing
                        // it would lose every variable for nothing.
                        if compiling_now() || worker_cpu.busy() {
                            grace_from = Some(Instant::now());
                        }
                    }
                    let from = grace_from.map_or(at, |g| g.max(at));
                    if from.elapsed() >= INTERRUPT_GRACE {
                        // Only the child that ran this cell: after a death evcxr may already
                        // have started a new one.
                        if cell_pid.is_some() && shared.child_pid() == cell_pid {
                            shared.signal_child(libc::SIGKILL);
                        }
                        killed = true;
                    }
                }
                if idle {
                    if let Ok(line) = outs.stdout.recv_timeout(Duration::from_millis(5)) {
                        cell_build.finish(sink);
                        send_stdout(line, || outs.stdout.recv_timeout(STDOUT_GATHER).ok(), sink);
                    }
                }
            }
            cell_build.finish(sink);
            match worker.join() {
                Ok(Ok(r)) => Ok(r),
                _ => Err(()),
            }
        });
        shared.in_cell.store(false, std::sync::atomic::Ordering::SeqCst);
        // Lines still in flight from the child's stderr: wait for a short quiet period.
        let drain_until = Instant::now() + Duration::from_millis(300);
        if let Ok(line) = ctx.outputs.stdout.try_recv() {
            send_stdout(line, || ctx.outputs.stdout.recv_timeout(STDOUT_GATHER).ok(), sink);
        }
        while Instant::now() < drain_until {
            match ctx.outputs.stderr.recv_timeout(Duration::from_millis(15)) {
                Ok(line) => router.route(line, sink),
                Err(_) => break,
            }
        }
        router.flush(sink);
        let overflowed = router.overflowed;
        let kept = std::mem::take(&mut router.kept);
        let stops = std::mem::take(&mut router.stops);
        let interrupted = shared.interrupt_at.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        let generated = ctx.cmd.last_source().ok();
        let status = match result {
            Ok(Ok(outputs)) => {
                let panicked = outputs.content_by_mime_type.contains_key(render::PANIC_MIME);
                let (display, split_errors) = render::split_outputs(outputs.content_by_mime_type, rewritten, generated.as_deref());
                // A `?` that stopped the cell: its error (qmark.rs), before any other.
                let stopped = !stops.is_empty();
                let mut errors = stops;
                errors.extend(split_errors);
                // A cell that stopped early (a panic, or `?` on an `Err`) keeps none of
                // the variables it bound: say which.
                self.refresh_vars();
                if panicked || stopped || saw_stderr.get() {
                    // evcxr dropped the names the failed cell bound again: bind those whose
                    // earlier value the engine kept again, from it.
                    let restore: Vec<(String, String)> = vars_before
                        .iter()
                        .filter(|(n, _)| kept.contains(n) && !self.vars.iter().any(|(v, _)| v == n))
                        .cloned()
                        .collect();
                    if !restore.is_empty() {
                        self.restore_kept(&restore);
                        self.refresh_vars();
                    }
                    let bound = bindings::cell_bindings(rewritten);
                    let has = |vars: &[(String, String)], n: &str| vars.iter().any(|(v, _)| v == n);
                    let (lost, stale): (Vec<_>, Vec<_>) =
                        bound.into_iter().filter(|b| !has(&self.vars, &b.name) || has(&vars_before, &b.name)).partition(|b| !has(&self.vars, &b.name));
                    // Names also bound before are certainly stale only when the cell failed.
                    let stale = if panicked || stopped || !lost.is_empty() { stale } else { Vec::new() };
                    let gone: Vec<_> = lost.iter().filter(|b| has(&vars_before, &b.name)).cloned().collect();
                    if let Some(note) = bindings::not_kept_note(&lost, &stale, &gone) {
                        match errors.last_mut() {
                            Some(Output::Error { traceback, .. }) => {
                                traceback.push(String::new());
                                traceback.push(note);
                            }
                            _ => errors.push(render::simple_error("VariablesNotKept", note)),
                        }
                    }
                }
                let had_errors = !errors.is_empty();
                for e in errors {
                    sink(e);
                }
                if !had_errors && let Some(note) = bindings::moved_note(&vars_before, &self.vars, rewritten) {
                    sink(Output::Stderr(format!("{note}\n")));
                }
                if let Some(d) = display {
                    sink(d);
                }
                match (had_errors, interrupted) {
                    (false, _) => ExecStatus::Ok,
                    (true, true) => ExecStatus::Interrupted,
                    (true, false) => ExecStatus::Error,
                }
            }
            Ok(Err(evcxr::Error::SubprocessTerminated(msg))) => {
                return self.recover_child(&msg, &vars_before, interrupted, overflowed, sink);
            }
            Ok(Err(_)) if interrupted => {
                // In a terminal, Ctrl-C also reaches the compiler evcxr is running.
                sink(render::simple_error(
                    "Interrupted",
                    "interrupted while the cell was being compiled: nothing ran, and every variable is kept",
                ));
                ExecStatus::Interrupted
            }
            Ok(Err(evcxr::Error::CompilationErrors(errors))) => {
                // A cell ending inside a bracket or string: rustc would point at the
                // session's wrapper brace; the user's unclosed delimiter is named instead.
                let unclosed = if magic.is_none() { super::complete::unclosed_error(user_code) } else { None };
                let mut out = unclosed.unwrap_or_else(|| render::compile_errors(&errors, user_code, inserted, magic));
                // Rust above a magic compiles with it: a user used to IPython's line-by-line
                // cells would expect those statements to have run.
                if let (Some(m), Output::Error { traceback, .. }) = (magic, &mut out)
                    && user_code.lines().take(m.line.saturating_sub(1)).any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
                {
                    traceback.push(String::new());
                    traceback.push(format!(
                        "note: nothing in this cell ran: the Rust above the magic (lines 1-{}) compiles together with it, so \
                         it did not run either; put those lines in their own cell to keep what they bind",
                        m.line - 1
                    ));
                }
                sink(out);
                ExecStatus::Error
            }
            Ok(Err(evcxr::Error::TypeRedefinedVariablesLost(lost))) => {
                sink(render::simple_error(
                    "VariablesLost",
                    format!("redefining a type lost these variables: {}", lost.join(", ")),
                ));
                ExecStatus::Error
            }
            Ok(Err(other)) => {
                let text = other.to_string();
                let note = render::unpersistable_note(&text).map(|n| format!("\nnote: {n}")).unwrap_or_default();
                sink(render::simple_error("Error", format!("{text}{note}")));
                ExecStatus::Error
            }
            Err(()) => {
                // evcxr itself panicked: its state is unknown, so start afresh next time.
                sink(render::simple_error("InternalError", "evcxr panicked while evaluating the cell; the evaluation context will be restarted"));
                self.state = State::Failed(String::new());
                return ExecStatus::Error;
            }
        };
        self.refresh_vars();
        status
    }

    /// After the child died (crash, abort, kill by interrupt): tell the user what was lost,
    /// make sure a child runs again (evcxr restarts it; if that failed, a new context), and
    /// load the prelude again. `overflowed`: the engine reported a stack overflow first.
    fn recover_child(
        &mut self,
        msg: &str,
        vars_before: &[(String, String)],
        interrupted: bool,
        overflowed: bool,
        sink: &mut dyn FnMut(Output),
    ) -> ExecStatus {
        let lost = if vars_before.is_empty() {
            "no variables were lost".to_string()
        } else {
            let names: Vec<&str> = vars_before.iter().map(|(n, _)| n.as_str()).collect();
            format!("these variables were lost: {}", names.join(", "))
        };
        let how = msg.trim().lines().last().unwrap_or("").trim().to_string();
        let (ename, head) = if interrupted {
            ("Interrupted", format!(
                "the cell did not stop within {} s of the interrupt, so the evaluation process was restarted; {lost}",
                INTERRUPT_GRACE.as_secs()
            ))
        } else if overflowed {
            ("StackOverflow", format!(
                "the cell overflowed its stack, which killed the evaluation process ({how}); it was restarted, and {lost}"
            ))
        } else {
            ("ChildDied", format!("the evaluation process died ({how}); it was restarted, and {lost}"))
        };
        let mut traceback = vec![format!("{ename}: {head}")];
        if overflowed && !interrupted {
            traceback.push(STACK_OVERFLOW_HINT.to_string());
        } else if !interrupted {
            traceback.extend(msg.trim().lines().filter(|l| l.trim() != how).map(str::to_string));
        }
        let reload = if self.opts.prelude { "The engine prelude is being loaded again." } else { "" };
        if !reload.is_empty() {
            traceback.push(reload.to_string());
        }
        sink(Output::Error { ename: ename.into(), evalue: head, traceback });
        // evcxr restarts the child itself; if that failed, make a new context.
        let alive = self.shared.child_pid().is_some();
        if alive && let State::Ready(ctx) = &mut self.state {
            for note in run_setup(ctx, &self.opts) {
                sink(note);
            }
        } else {
            let started = start_child(&self.opts, &self.slot, &self.shared);
            for note in started.notes {
                sink(note);
            }
            self.state = match started.ctx {
                Ok(ctx) => State::Ready(Box::new(ctx)),
                Err(e) => State::Failed(format!("{e:#}")),
            };
        }
        self.refresh_vars();
        if interrupted { ExecStatus::Interrupted } else { ExecStatus::Error }
    }

    /// Binds each of `vars` (`(name, type)`) again from the value the engine kept for it
    /// when the failed cell started (`jax::interactive::rebound`); one hidden cell for
    /// all, or one each when that fails (a type evcxr cannot name leaves its variable
    /// lost, as before).
    fn restore_kept(&mut self, vars: &[(String, String)]) {
        let State::Ready(ctx) = &mut self.state else { return };
        if eval_quiet(ctx, &bindings::restore_code(vars)).is_err() && vars.len() > 1 {
            for var in vars {
                let _ = eval_quiet(ctx, &bindings::restore_code(std::slice::from_ref(var)));
            }
        }
    }

    fn refresh_vars(&mut self) {
        if let State::Ready(ctx) = &self.state {
            let mut vars: Vec<(String, String)> = ctx
                .cmd
                .variables_and_types()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect();
            vars.sort();
            self.vars = vars;
        } else {
            self.vars.clear();
        }
    }
}

/// The CPU-time clock of the thread that runs evcxr's `execute` for a cell (Linux
/// `pthread_getcpuclockid`), recorded by that thread when it starts.
#[derive(Default)]
struct WorkerClock(std::sync::Mutex<Option<libc::clockid_t>>);

impl WorkerClock {
    /// Records the calling thread's CPU clock.
    fn record_current_thread(&self) {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self is the calling thread; `id` is a valid out-pointer.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) } == 0 {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
        }
    }

    /// CPU time the thread has used, in nanoseconds (`None` before it recorded its clock or
    /// after it ended).
    fn cpu_ns(&self) -> Option<u64> {
        let id = (*self.0.lock().unwrap_or_else(|e| e.into_inner()))?;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer; a clock of an ended thread gives an error.
        (unsafe { libc::clock_gettime(id, &mut ts) } == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

/// Whether the cell's evcxr thread is working in this process (rust-analyzer's analysis
/// of the cell, code generation) rather than waiting for the evaluation child or for
/// cargo: its CPU time grew by at least a twentieth of the wall time (a share a loaded
/// machine still gives a working thread; a waiting one uses none) over the last 100 ms or
/// more.
struct WorkerCpu<'a> {
    clock: &'a WorkerClock,
    last: Option<(Instant, u64)>,
    busy: bool,
}

impl<'a> WorkerCpu<'a> {
    fn new(clock: &'a WorkerClock) -> Self {
        WorkerCpu { clock, last: None, busy: false }
    }

    fn busy(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|(at, _)| now.duration_since(at) < Duration::from_millis(100)) {
            return self.busy;
        }
        let Some(cpu) = self.clock.cpu_ns() else { return false };
        if let Some((at, before)) = self.last {
            let wall = now.duration_since(at).as_nanos() as u64;
            self.busy = cpu.saturating_sub(before) * 20 >= wall;
        }
        self.last = Some((now, cpu));
        self.busy
    }
}

/// Sends `first` and the stdout lines that follow within [`STDOUT_GATHER`] of each other
/// (for up to 50 ms) as one output (a `{:#?}` print is one stream message in Jupyter, not
/// one per line). An input request line (the child asking for a line of input) goes out
/// on its own.
fn send_stdout(first: String, mut more: impl FnMut() -> Option<String>, sink: &mut dyn FnMut(Output)) {
    let mut batch = String::new();
    // A cell that prints without pause still shows its output (and the caller gets back
    // to its interrupt checks) at least every 50 ms.
    let until = Instant::now() + Duration::from_millis(50);
    let more = std::iter::from_fn(|| if Instant::now() < until { more() } else { None });
    for line in std::iter::once(first).chain(more) {
        let text = qmark::readable(&line) + "\n";
        if text.starts_with(super::input::INPUT_MARK) {
            if !batch.is_empty() {
                sink(Output::Stdout(std::mem::take(&mut batch)));
            }
            sink(Output::Stdout(text));
        } else {
            batch.push_str(&text);
        }
    }
    if !batch.is_empty() {
        sink(Output::Stdout(batch));
    }
}

/// Whether evcxr is compiling a cell right now: a `cargo` or `rustc` process whose parent
/// is this process (Linux `/proc`; false where it cannot be read).
fn compiling_now() -> bool {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str() else { continue };
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may contain spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if ppid == Some(me.as_str()) && (comm == "cargo" || comm.starts_with("rustc")) {
            return true;
        }
    }
    false
}

/// `code` with one line of session code put in: the `?` stop hook (`qmark::STOP_HOOK`)
/// and, with the engine, the call that registers the cell's lines with the engine
/// (`jax::interactive::enter_cell`: engine locations then read `cell N, line L`); with the
/// line (1-based) it takes, or `None` when there is nothing to add or the cell has no Rust
/// code (only evcxr `:` commands). evcxr reads `:` commands and `!` shell lines only before
/// the cell's first line of Rust (blank lines and `//` comments may sit between them), so
/// the session's line goes right before that first line of Rust: a cell that mixes
/// commands (`:timing`, `:efmt`) with code gets the same `?` errors and locations as any
/// other. Compile errors below that line shift their line numbers back by one.
fn located_code(ctx: &Ctx, slot: &Slot, label: u64, code: &str, keep: &str) -> Option<(String, usize)> {
    if !(ctx.engine || ctx.stop_hook) {
        return None;
    }
    let at = first_rust_line(code)?;
    let mut first = String::new();
    if ctx.stop_hook {
        first.push_str(qmark::STOP_HOOK);
    }
    if ctx.engine {
        let lib_rs = slot.dir().join("src").join("lib.rs");
        first.push_str(&format!(" jax::interactive::enter_cell({label}, {:?}, {code:?});", lib_rs.to_string_lossy()));
        first.push_str(keep);
    }
    let line = code[..at].matches('\n').count() + 1;
    Some((format!("{}{first}\n{}", &code[..at], &code[at..]), line))
}

/// Where the session's line goes in `code`: after the last line evcxr reads as a command
/// before the first line of Rust (its `CodeBlock::from_original_user_code`: lines of `:`
/// commands after spaces and `!` shell lines; blank lines and lines starting with `//`
/// may sit among them), so at 0 when the cell starts with Rust; `None` when no Rust
/// follows (a cell of commands only).
fn first_rust_line(code: &str) -> Option<usize> {
    let mut at = 0;
    let mut after_commands = 0;
    for line in code.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.trim_start_matches(' ').starts_with(':') || bare.starts_with('!') {
            after_commands = at + line.len();
        } else if !(bare.starts_with("//") || bare.trim().is_empty()) {
            return Some(after_commands);
        }
        at += line.len();
    }
    None
}

/// The line the engine writes to stderr when the child dies of a stack overflow
/// (`jax::runtime::stack_overflow::MARKER`; repeated here as the session does not link
/// the engine).
pub const STACK_OVERFLOW_MARKER: &str = "\x1ejaxrepl-stack-overflow";

/// The prefix of the line the engine writes for each earlier value it kept at a cell's
/// start, before the variable's name (`jax::interactive::rebound::KEPT_MARKER`).
pub const KEPT_MARKER: &str = "\x1ejaxrepl-kept ";

/// What a stack overflow most likely means, and what to do about it.
pub const STACK_OVERFLOW_HINT: &str = "The usual cause is recursion too deep for the stack (8 MiB on the main thread) or \
     without end: check the recursion's base case, and turn deep recursion into a loop (Rust does not \
     eliminate tail calls). Code that must recurse deeply can run on a thread with a larger stack: \
     std::thread::Builder::new().stack_size(512 << 20).spawn(move || ...)?.join()";

/// A line from the child's stderr: an engine progress event (`jax::progress`'s wire
/// format) or plain stderr text.
pub(super) fn stderr_output(line: String) -> Output {
    if let Some(json) = line.strip_prefix(PROGRESS_PREFIX)
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(json)
        && let (Some(id), Some(text)) = (v["id"].as_u64(), v["text"].as_str())
    {
        return Output::Progress { id: format!("compile-{id}"), text: text.to_string(), done: v["done"].as_bool().unwrap_or(false) };
    }
    Output::Stderr(line + "\n")
}

/// The prefix of the engine's progress lines (`jax::progress::LINE_PREFIX`; the session
/// does not link the engine, so the wire format is repeated here; both sides test it
/// against the same literal line).
pub const PROGRESS_PREFIX: &str = "\x1ejaxrepl-progress ";

/// The delay before progress is shown: 1 s, or `JAXREPL_PROGRESS_AFTER_MS`.
fn progress_after() -> Duration {
    std::env::var("JAXREPL_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_millis)
}

/// Progress of evcxr building a cell (cargo/rustc children of this process) that takes
/// longer than a second (or `JAXREPL_PROGRESS_AFTER_MS`): updated every 0.5 s, done when
/// the build is over or the cell ends.
struct CellBuildProgress {
    id: String,
    started: Instant,
    last_check: Option<Instant>,
    shown: bool,
    finished: bool,
}

impl CellBuildProgress {
    fn new(cell: u64) -> Self {
        CellBuildProgress { id: format!("cell-{cell}"), started: Instant::now(), last_check: None, shown: false, finished: false }
    }

    fn poll(&mut self, sink: &mut dyn FnMut(Output), worker: &mut WorkerCpu) {
        if self.finished || self.started.elapsed() < progress_after() {
            return;
        }
        if self.last_check.is_some_and(|t| t.elapsed() < Duration::from_millis(500)) {
            return;
        }
        self.last_check = Some(Instant::now());
        let building = compiling_now();
        if building || worker.busy() {
            self.shown = true;
            let what = if building { "cargo/rustc" } else { "analysing it with rust-analyzer" };
            let text = format!("building the cell ({what}): {:.1} s", self.started.elapsed().as_secs_f64());
            sink(Output::Progress { id: self.id.clone(), text, done: false });
        } else if self.shown {
            // The build is over: the cell itself is running now. (Before anything was
            // shown this says nothing: evcxr may not have started cargo yet.)
            self.finish(sink);
        }
    }

    fn finish(&mut self, sink: &mut dyn FnMut(Output)) {
        if self.shown && !self.finished {
            let text = format!("built the cell in {:.1} s", self.started.elapsed().as_secs_f64());
            sink(Output::Progress { id: self.id.clone(), text, done: true });
        }
        self.finished = true;
    }
}

/// Completion: static candidates plus rust-analyzer's when a context is available.
pub(super) fn complete(ctx: Option<&mut Ctx>, vars: &[(String, String)], code: &str, cursor: usize) -> Completions {
    let cursor = clamp_to_boundary(code, cursor);
    let ours = static_completions(vars, code, cursor);
    if ours.start < cursor && code[ours.start..cursor].starts_with('%') {
        return ours;
    }
    let found = ctx.and_then(|ctx| quietly(|| ctx.cmd.completions(code, cursor))).and_then(|r| r.ok()).and_then(|found| {
        let ok = !found.completions.is_empty()
            && found.end_offset <= code.len()
            && found.start_offset <= found.end_offset
            && code.is_char_boundary(found.start_offset);
        ok.then(|| {
            let texts = found.completions.iter().map(|c| completion_insert(&c.code)).collect();
            (found.start_offset, found.end_offset, texts)
        })
    });
    merge_completions(code, ours, found)
}

/// The candidates known without rust-analyzer: magics after `%`; else variables, prelude
/// names and keywords starting with the word before `cursor`, except after a `.` (a
/// method or field comes next: no keyword, variable or path fits there).
fn static_completions(vars: &[(String, String)], code: &str, cursor: usize) -> Completions {
    let (start, word) = word_before(code, cursor);
    let mut matches: Vec<String> = Vec::new();
    let push = |m: &str, matches: &mut Vec<String>| {
        if !matches.iter().any(|x| x == m) {
            matches.push(m.to_string());
        }
    };
    if let Some(name) = word.strip_prefix('%') {
        for m in MAGICS.iter().filter(|m| m.name.starts_with(name)) {
            push(&format!("%{}", m.name), &mut matches);
        }
        return Completions { matches, start, end: cursor };
    }
    let after_dot = code[..start].ends_with('.');
    if !word.is_empty() && !after_dot {
        for (name, _) in vars.iter().filter(|(n, _)| n.starts_with(word)) {
            push(name, &mut matches);
        }
        for name in PRELUDE_NAMES.iter().filter(|n| n.starts_with(word)) {
            push(name, &mut matches);
        }
        if !word.contains(':') {
            for kw in KEYWORDS.iter().filter(|k| k.starts_with(word)) {
                push(kw, &mut matches);
            }
        }
    }
    Completions { matches, start, end: cursor }
}

/// Merges rust-analyzer's answer `(start, end, texts)` into the static candidates `ours`.
/// rust-analyzer replaces only the last path segment (`ta` of `jnp::ta`) where ours
/// replace the whole path: its candidates then get the path in front (`jnp::tan`). Its
/// candidates that start with the typed text come first, then ours not already there,
/// then its others (fuzzy matches). When its range is unrelated to ours (after a `.`,
/// say) and we have nothing, its answer is used as it is.
fn merge_completions(code: &str, ours: Completions, found: Option<(usize, usize, Vec<String>)>) -> Completions {
    let Some((start, end, texts)) = found else { return ours };
    let add = |list: &mut Vec<String>, m: String| {
        if !list.contains(&m) {
            list.push(m);
        }
    };
    if end == ours.end && start >= ours.start && code.is_char_boundary(start) {
        let path = &code[ours.start..start];
        let typed = &code[ours.start..end];
        let theirs: Vec<String> = texts.into_iter().map(|t| format!("{path}{t}")).collect();
        let mut matches = Vec::new();
        for t in theirs.iter().filter(|t| t.starts_with(typed)) {
            add(&mut matches, t.clone());
        }
        for m in ours.matches {
            add(&mut matches, m);
        }
        for t in theirs {
            add(&mut matches, t);
        }
        return Completions { matches, start: ours.start, end: ours.end };
    }
    if ours.matches.is_empty() {
        let mut matches = Vec::new();
        for t in texts {
            add(&mut matches, t);
        }
        return Completions { matches, start, end };
    }
    ours
}

/// Runs `f` (a rust-analyzer query) with panics silenced: rust-analyzer sometimes panics
/// inside a query (a cancelled or inconsistent analysis); its message and backtrace must
/// not reach the user's terminal. The panic hook is replaced for the call, printing only
/// panics of other threads, and restored after. A panic gives `None` (no candidates).
fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    use std::sync::Arc;
    type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Send + Sync + 'static>;
    if std::thread::panicking() {
        return catch_unwind(AssertUnwindSafe(f)).ok();
    }
    let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
    let me = std::thread::current().id();
    let forward = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            forward(info);
        }
    }));
    let result = catch_unwind(AssertUnwindSafe(f));
    drop(std::panic::take_hook());
    match Arc::try_unwrap(previous) {
        Ok(hook) => std::panic::set_hook(hook),
        // Another thread still runs our hook's copy (it is printing a panic): chain to it.
        Err(shared) => std::panic::set_hook(Box::new(move |info| shared(info))),
    }
    result.ok()
}

/// What a completion inserts: the plain text of rust-analyzer's snippet, but for a call
/// with arguments only the name and `(` (`reshape(${1:shape})$0` → `reshape(`), so no
/// parameter names land in the line; a call without arguments keeps `()`.
pub(super) fn completion_insert(code: &str) -> String {
    let plain = plain_completion(code);
    if let Some(p) = plain.find('(') {
        let head = &plain[..p];
        let name = head.strip_suffix('!').unwrap_or(head);
        let is_call = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
        if is_call && !plain[p + 1..].starts_with(')') {
            return plain[..=p].to_string();
        }
    }
    plain
}

/// A rust-analyzer completion as plain text: LSP snippet syntax (`$0`, `$1`,
/// `${1:default}`, `${2|a,b|}`, `\$`) becomes what a user would type, keeping defaults
/// (`sin(${1:x})$0` → `sin(x)`). Grammar: the LSP specification's "Snippet Syntax".
pub(super) fn plain_completion(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let b: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '\\' if i + 1 < b.len() && matches!(b[i + 1], '$' | '}' | '\\') => {
                out.push(b[i + 1]);
                i += 2;
            }
            '$' if i + 1 < b.len() && b[i + 1].is_ascii_digit() => {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            '$' if i + 1 < b.len() && b[i + 1] == '{' => {
                // ${N}, ${N:default}, ${N|a,b|}: keep the default (first choice).
                let mut j = i + 2;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                let mut depth = 1;
                let mut k = j;
                while k < b.len() && depth > 0 {
                    match b[k] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    k += 1;
                }
                // Closed: the inner text ends before the `}`; unclosed: it runs to the end.
                let end = if depth == 0 { k - 1 } else { k };
                let inner: String = b[j..end].iter().collect();
                if let Some(default) = inner.strip_prefix(':') {
                    out.push_str(&plain_completion(default));
                } else if let Some(choices) = inner.strip_prefix('|') {
                    out.push_str(choices.trim_end_matches('|').split(',').next().unwrap_or(""));
                }
                i = k;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Inspection: a variable's type, else rust-analyzer's hover text.
pub(super) fn inspect(ctx: Option<&mut Ctx>, vars: &[(String, String)], code: &str, cursor: usize) -> Option<String> {
    let cursor = clamp_to_boundary(code, cursor);
    let word = word_at(code, cursor);
    if word.is_empty() {
        return None;
    }
    if let Some((name, ty)) = vars.iter().find(|(n, _)| n == word) {
        return Some(format!("{name}: {ty}"));
    }
    if let Some(m) = MAGICS.iter().find(|m| m.name == word) {
        return Some(format!("%{}: {}", m.name, m.summary));
    }
    let ctx = ctx?;
    // Hover at the end of the word.
    let end = code[cursor..]
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
        .map(|(i, _)| cursor + i)
        .unwrap_or(code.len());
    let (plain, _html) = quietly(|| ctx.cmd.hover_at(code, end))?.ok()?;
    let plain = plain.trim().to_string();
    if plain.is_empty() || plain == "No documentation found" { None } else { Some(plain) }
}

/// The kernel moves a session into its own thread: it must stay `Send`.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Session>();
    assert_send::<super::InterruptHandle>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_working_worker_thread_is_busy_and_a_waiting_one_is_not() {
        let sample = |work: bool| {
            let clock = WorkerClock::default();
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    clock.record_current_thread();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if work {
                            std::hint::black_box((0..1000u64).sum::<u64>());
                        } else {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                });
                while clock.cpu_ns().is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut cpu = WorkerCpu::new(&clock);
                let first = cpu.busy(); // no history yet
                std::thread::sleep(Duration::from_millis(300));
                let busy = cpu.busy();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                (first, busy)
            })
        };
        assert_eq!(sample(false), (false, false));
        // A spinning thread gets well over a twentieth of a core even on a loaded machine.
        assert_eq!(sample(true), (false, true));
    }

    #[test]
    fn completions_lose_snippet_syntax() {
        assert_eq!(plain_completion("sin()$0"), "sin()");
        assert_eq!(plain_completion("reshape(${1:shape})$0"), "reshape(shape)");
        assert_eq!(plain_completion("f(${1:a}, ${2:b})"), "f(a, b)");
        assert_eq!(plain_completion("m!(${1|x,y|})"), "m!(x)");
        assert_eq!(plain_completion("cost \\$5"), "cost $5");
        assert_eq!(plain_completion("${1:outer ${2:inner}}"), "outer inner");
        assert_eq!(plain_completion("plain_name"), "plain_name");
        assert_eq!(plain_completion("bad ${1:unclosed"), "bad unclosed");
        assert_eq!(plain_completion("$"), "$");
    }

    #[test]
    fn completions_insert_only_the_name_and_paren() {
        assert_eq!(completion_insert("reshape(${1:shape})$0"), "reshape(");
        assert_eq!(completion_insert("f(${1:a}, ${2:b})"), "f(");
        assert_eq!(completion_insert("m!(${1|x,y|})"), "m!(");
        assert_eq!(completion_insert("sin()$0"), "sin()");
        assert_eq!(completion_insert("plain_name"), "plain_name");
        assert_eq!(completion_insert("Point { x: ${1:()} }$0"), "Point { x: () }");
    }

    #[test]
    fn a_panicking_query_is_silent_and_gives_nothing() {
        let out: Option<u32> = quietly(|| panic!("rust-analyzer went wrong"));
        assert_eq!(out, None);
        assert_eq!(quietly(|| 7), Some(7));
        // The previous hook is back: a caught panic still reaches it.
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = seen.clone();
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |_| s.store(true, std::sync::atomic::Ordering::SeqCst)));
        let _ = quietly(|| 1);
        let _ = catch_unwind(|| panic!("after"));
        let _ = std::panic::take_hook();
        std::panic::set_hook(before);
        assert!(seen.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn no_keywords_variables_or_paths_after_a_dot() {
        let vars = vec![("sup".to_string(), "i32".to_string())];
        let c = static_completions(&vars, "x.su", 4);
        assert_eq!((c.matches.len(), c.start, c.end), (0, 2, 4), "{c:?}");
        let c = static_completions(&vars, "let y = su", 10);
        assert_eq!(c.matches, vec!["sup", "super"]);
        assert_eq!(c.start, 8);
    }

    #[test]
    fn rust_analyzers_last_segment_candidates_get_the_path() {
        let code = "let y = jnp::ta";
        let ours = static_completions(&[], code, code.len());
        assert_eq!(ours.matches, vec!["jnp::tanh"]);
        // rust-analyzer replaces `ta` only, and also answers fuzzy matches.
        let found = Some((13, 15, vec!["tan(".to_string(), "tanh(".into(), "atan(".into(), "take(".into()]));
        let c = merge_completions(code, ours, found);
        assert_eq!(c.matches, vec!["jnp::tan(", "jnp::tanh(", "jnp::take(", "jnp::tanh", "jnp::atan("]);
        assert_eq!((c.start, c.end), (8, 15));
        // After a `.`, its range differs and we have nothing: its answer as it is.
        let c = merge_completions("x.su", static_completions(&[], "x.su", 4), Some((2, 4, vec!["sum(".into()])));
        assert_eq!(c, Completions { matches: vec!["sum(".into()], start: 2, end: 4 });
        // The same range: its candidates and ours.
        let ours = static_completions(&[], "jit", 3);
        let c = merge_completions("jit", ours, Some((0, 3, vec!["jit(".into()])));
        assert_eq!(c.matches, vec!["jit(", "jit"]);
    }

    #[test]
    fn engine_progress_lines_become_progress_outputs() {
        // The same literal line the engine's own test checks (jax::progress::line).
        let line = "\x1ejaxrepl-progress {\"id\":7,\"text\":\"compiling jit(f) \\\"x\\\"\",\"done\":false}".to_string();
        assert_eq!(
            stderr_output(line),
            Output::Progress { id: "compile-7".into(), text: "compiling jit(f) \"x\"".into(), done: false }
        );
        let done = "\x1ejaxrepl-progress {\"id\":7,\"text\":\"compiled jit(f) in 1.2 s\",\"done\":true}".to_string();
        assert!(matches!(stderr_output(done), Output::Progress { done: true, .. }));
        // Anything else, including a malformed progress line, stays stderr text.
        assert_eq!(stderr_output("warning: x".into()), Output::Stderr("warning: x\n".into()));
        let bad = "\x1ejaxrepl-progress {not json".to_string();
        assert_eq!(stderr_output(bad.clone()), Output::Stderr(bad + "\n"));
    }

    #[test]
    fn the_session_line_goes_after_leading_evcxr_commands() {
        assert_eq!(first_rust_line("let a = 1;"), Some(0));
        assert_eq!(first_rust_line("// doc\nfn f() {}"), Some(0));
        let cell = ":timing\n  :efmt {:?}\n\nlet n: i32 = \"x\".parse()?;";
        assert_eq!(first_rust_line(cell), Some(":timing\n  :efmt {:?}\n".len()));
        assert_eq!(first_rust_line("!ls\n// c\nx"), Some(4));
        // Commands only: nothing to add (no build for `:vars`).
        assert_eq!(first_rust_line(":vars\n\n"), None);
        assert_eq!(first_rust_line(""), None);
    }
}
