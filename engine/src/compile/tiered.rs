//! Tiered compilation: a quick first tier now, the optimised tier in the background.
//!
//! `compile_tiered` compiles a module with the same MLIR pipelines as `compile` but asks
//! LLVM for `TIER1_OPT_LEVEL` (no IR optimisation passes; code generated at LLVM's `None`
//! level, FastISel), which cuts the LLVM share of a first call several-fold. The returned
//! executable carries an [`Upgrade`] slot: from its second execution on (or on
//! [`Executable::request_upgrade`]) the module is recompiled at the requested level
//! (default O2) on one background worker thread, in a second MLIR context of its own, so
//! foreground compiles never wait for it. When the optimised executable is ready it is
//! published in the slot (`OnceLock`, one atomic load per call) and every later
//! execution of the tier-1 executable forwards to it; callers keep the same
//! `Arc<Executable>` (executable cache, jit caches, `Compiled`), so the swap is seen by
//! all of them at once.
//!
//! The two tiers run the same MLIR passes, so `optimized_ir`, the LLVM IR (before LLVM's
//! passes), cost and memory analysis and the assembly (emitted at the requested level)
//! describe the optimised tier whatever tier runs. Both tiers perform the same float
//! operations: fused multiply-adds are formed before LLVM's passes
//! (`context::fuse_multiply_adds`), float sums add in an order fixed by the lowering
//! (`Lowerer::reduce_lanes`) and no fast-math flag lets LLVM reassociate, so a function's
//! first call and its later calls agree bitwise (tested in `tests/tests/shared_jit.rs`).
//!
//! Bounds and lifetime: one worker thread, at most `QUEUE_MAX` queued requests (a request
//! that does not fit is dropped and made again at a later call); the queue holds weak
//! references, so an executable dropped before its turn is skipped. The worker never
//! blocks an interrupt (nothing in the foreground waits for it). At process exit an
//! `atexit` hook stops the worker taking new work and waits (at most
//! `EXIT_WAIT`) for the compile in flight, so LLVM's static destructors never run under a
//! live compile.
//!
//! Modules whose arrays are large (`HEAVY_ELEMENTS` elements in arguments, results and
//! constants together) compile at the requested level at once: there the run time of
//! unoptimised loops would cost more than the compile time saved.

use super::persistent::{self, Pending};
use super::{compile_in, CompileOptions, Executable};
use crate::config;
use crate::error::Error;
use crate::lower::LoweredModule;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// LLVM optimisation level of the first tier.
pub const TIER1_OPT_LEVEL: u8 = 0;

/// Modules with at least this many array elements (arguments, results and constants)
/// are compiled at the requested level at once (no first tier).
pub const HEAVY_ELEMENTS: usize = 1 << 22;

/// At most this many upgrade requests wait for the worker.
const QUEUE_MAX: usize = 32;

/// How long process exit waits for a background compile in flight.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// States of an `Upgrade`.
const IDLE: u8 = 0;
const QUEUED: u8 = 1;
const DONE: u8 = 2;
const FAILED: u8 = 3;

/// The optimised tier of a tier-1 executable: what to compile, and the result.
pub(crate) struct Upgrade {
    /// The optimised executable, once compiled.
    pub(crate) ready: OnceLock<Executable>,
    state: AtomicU8,
    /// The module and options to compile (dropped once compiled).
    source: Mutex<Option<(LoweredModule, CompileOptions)>>,
    /// `jit(<name>)` for `jax_log_compiles` lines.
    name: String,
    /// The compile error, if the upgrade failed (the tier-1 executable keeps running).
    error: Mutex<Option<String>>,
    /// Signalled when the upgrade is done or failed.
    done: (Mutex<bool>, Condvar),
    /// The tier-1 executable's aliases (which donated arguments hold their outputs).
    tier1_aliases: Vec<Option<usize>>,
    /// The persistent cache entry to write the optimised tier's code to.
    persist: Option<Arc<Pending>>,
}

impl Upgrade {
    fn new(module: LoweredModule, opts: CompileOptions, tier1_aliases: Vec<Option<usize>>, persist: Option<Arc<Pending>>) -> Upgrade {
        // `jit(<name>)` less its `jit(` `)`.
        let shown = super::display_name(&module.text);
        let name = shown.strip_prefix("jit(").and_then(|n| n.strip_suffix(')')).unwrap_or(&shown).to_string();
        Upgrade {
            ready: OnceLock::new(),
            state: AtomicU8::new(IDLE),
            source: Mutex::new(Some((module, opts))),
            name,
            error: Mutex::new(None),
            done: (Mutex::new(false), Condvar::new()),
            tier1_aliases,
            persist,
        }
    }

    /// Queues the background compile unless it is queued, running, done or failed.
    pub(crate) fn request(self: &Arc<Self>) {
        if self.state.compare_exchange(IDLE, QUEUED, Ordering::AcqRel, Ordering::Relaxed).is_ok() && !worker().push(Arc::downgrade(self)) {
            // Queue full or shutting down: a later call asks again.
            self.state.store(IDLE, Ordering::Release);
        }
    }

    /// Waits up to `timeout` for the upgrade to finish; whether the optimised tier is ready.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let (m, cv) = &self.done;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let _g = cv.wait_timeout_while(g, timeout, |done| !*done).unwrap_or_else(|e| e.into_inner());
        self.ready.get().is_some()
    }

    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Compiles the optimised tier (on the worker thread).
    fn run(&self) {
        let Some((module, opts)) = self.source.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let t0 = Instant::now();
        let r = compile_in(&module, &opts, true, self.persist.is_some());
        let secs = t0.elapsed().as_secs_f64();
        match r {
            // Donation must behave the same in both tiers: an optimised build that aliases
            // differently (it should not: the MLIR pipeline is the same) is not used.
            Ok(mut e) if e.aliases() == self.tier1_aliases.as_slice() => {
                if let Some(p) = &self.persist {
                    persistent::store(p, &mut e);
                }
                if config::log_compiles() {
                    eprintln!(
                        "Finished MLIR compilation of jit({}) in {secs:.9} sec (tier 2, LLVM O{}, background; replaces tier 1)",
                        self.name, opts.opt_level
                    );
                }
                let _ = self.ready.set(e);
                self.state.store(DONE, Ordering::Release);
            }
            Ok(_) => self.fail("the optimised tier aliases donated arguments differently from tier 1".into()),
            Err(e) => self.fail(e.to_string()),
        }
        let (m, cv) = &self.done;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }

    fn fail(&self, msg: String) {
        if let Some(p) = &self.persist {
            persistent::not_stored(p, &format!("the optimised tier failed to compile ({msg})"));
        }
        if config::log_compiles() {
            eprintln!("Tier-2 compilation of jit({}) failed; tier 1 keeps running: {msg}", self.name);
        }
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
        self.state.store(FAILED, Ordering::Release);
    }
}

impl Drop for Upgrade {
    /// An executable dropped before its optimised tier compiled writes no entry: say so in
    /// the verdict (`set` keeps an outcome already recorded).
    fn drop(&mut self) {
        if let Some(p) = &self.persist {
            persistent::not_stored(p, "the executable was dropped before its optimised tier compiled");
        }
    }
}

/// The background worker: a queue of weak upgrade requests and one thread.
struct Worker {
    queue: Mutex<VecDeque<Weak<Upgrade>>>,
    wake: Condvar,
    /// Set at process exit: take no more work.
    shutdown: AtomicBool,
    /// Whether a compile is running (guarded for the exit wait).
    busy: (Mutex<bool>, Condvar),
}

impl Worker {
    fn push(&self, up: Weak<Upgrade>) -> bool {
        if self.shutdown.load(Ordering::Acquire) {
            return false;
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= QUEUE_MAX {
            return false;
        }
        q.push_back(up);
        self.wake.notify_one();
        true
    }

    fn run(&'static self) {
        loop {
            let job = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if self.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(j) = q.pop_front() {
                        break j;
                    }
                    q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let Some(up) = job.upgrade() else { continue };
            {
                let mut b = self.busy.0.lock().unwrap_or_else(|e| e.into_inner());
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                *b = true;
            }
            // A panic in the compile must not kill the worker (nor leave `busy` set).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| up.run()));
            if r.is_err() {
                up.fail("the background compile panicked".into());
                let (m, cv) = &up.done;
                *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
                cv.notify_all();
            }
            drop(up);
            *self.busy.0.lock().unwrap_or_else(|e| e.into_inner()) = false;
            self.busy.1.notify_all();
        }
    }
}

unsafe extern "C" {
    fn atexit(f: extern "C" fn()) -> i32;
    /// llvm-c/ExecutionEngine.h: the process's GDB and perf JIT listeners (function
    /// statics in libLLVM, created on first call).
    fn LLVMCreateGDBRegistrationListener() -> *mut std::ffi::c_void;
    fn LLVMCreatePerfJITEventListener() -> *mut std::ffi::c_void;
}

extern "C" fn at_exit() {
    let w = worker();
    w.shutdown.store(true, Ordering::Release);
    w.wake.notify_all();
    let g = w.busy.0.lock().unwrap_or_else(|e| e.into_inner());
    let _g = w.busy.1.wait_timeout_while(g, EXIT_WAIT, |busy| *busy);
}

fn worker() -> &'static Worker {
    static W: OnceLock<&'static Worker> = OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Worker = Box::leak(Box::new(Worker {
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            busy: (Mutex::new(false), Condvar::new()),
        }));
        let spawned = std::thread::Builder::new().name("jax-compile-tier2".into()).spawn(move || w.run());
        if spawned.is_err() {
            w.shutdown.store(true, Ordering::Release);
        } else {
            // Exit runs handlers in reverse order of registration, and a function static
            // registers its destructor when first created: the statics a background
            // compile uses must exist before `at_exit` is registered, or exit destroys them
            // before `at_exit` waits for a compile that is using them. An ExecutionEngine
            // (`JAXREPL_SHARED_JIT=0`) registers every object with the perf and GDB JIT
            // listeners, function statics (the perf one crashed at exit in RTDyld's
            // onObjEmit when first created by a background compile).
            if !super::shared_jit_enabled() {
                // SAFETY: return the process-wide listeners; nothing is passed or freed.
                unsafe {
                    LLVMCreateGDBRegistrationListener();
                    LLVMCreatePerfJITEventListener();
                }
            }
            // SAFETY: registers a plain extern "C" fn with no arguments.
            unsafe { atexit(at_exit) };
        }
        w
    })
}

/// Whether `module` is worth a first tier: not when its arrays are large.
fn light(module: &LoweredModule) -> bool {
    let n: usize = module.in_avals.iter().chain(&module.out_avals).map(|a| a.size()).sum::<usize>()
        + module.const_args.iter().map(|b| b.aval().size()).sum::<usize>();
    n < HEAVY_ELEMENTS
}

/// Compiles `module` tiered when `jaxrepl_tiered_compilation` is on, `opts.opt_level` is
/// above `TIER1_OPT_LEVEL` and the module is light: a tier-1 executable at
/// `TIER1_OPT_LEVEL` that upgrades itself to `opts.opt_level` in the background (see the
/// module docs). Otherwise as `compile`. `Executable::tier` tells which tier runs.
///
/// Errors: as `compile` (of the first tier; a failing second tier only leaves the first
/// running, with `Executable::upgrade_error` set).
pub fn compile_tiered(module: &LoweredModule, opts: &CompileOptions) -> Result<Executable, Error> {
    compile_persistent_tiered(module, opts, None).map(|(e, ..)| e)
}

/// `compile_tiered`, writing the optimised code to the persistent compilation cache entry
/// `persist` (if given and the thresholds allow): at once when compiled untiered, else when
/// the optimised tier, queued at once, is ready. Also returns what the cache did (or will
/// do) with the entry, for `%explain`.
// `<=`: as in `compile_tiered`.
#[allow(clippy::absurd_extreme_comparisons)]
pub(crate) fn compile_persistent_tiered(module: &LoweredModule, opts: &CompileOptions, persist: Option<Arc<Pending>>) -> Result<(Executable, String, Option<Arc<OnceLock<String>>>), Error> {
    if !config::tiered_compilation() || opts.opt_level <= TIER1_OPT_LEVEL || !light(module) {
        let mut e = compile_in(module, opts, false, persist.is_some())?;
        let what = persist.as_ref().map(|p| persistent::store(p, &mut e)).unwrap_or_default();
        return Ok((e, what, None));
    }
    let mut e = compile_in(module, &CompileOptions { opt_level: TIER1_OPT_LEVEL }, false, false)?;
    let what = if persist.is_some() {
        format!("optimised tier (LLVM O{}) compiled in the background", opts.opt_level)
    } else {
        String::new()
    };
    let later = persist.as_ref().map(|p| p.outcome.clone());
    let start_now = persist.is_some();
    let up = Arc::new(Upgrade::new(module.clone(), opts.clone(), e.aliases().to_vec(), persist));
    if start_now {
        up.request();
    }
    e.upgrade = Some(up);
    Ok((e, what, later))
}
