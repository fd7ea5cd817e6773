//! Compilation: a `LoweredModule` becomes native code through MLIR's pass pipelines and
//! one process-wide ORC JIT (`orc`; an MLIR ExecutionEngine per executable with
//! `JAXREPL_SHARED_JIT=0`), and runs on host buffers.
//!
//! The compile stage adds the calling convention: `@main` is made private and called from
//! `@jaxrepl_entry(memref args.., memref outs..)` in destination-passing style
//! (`bufferization.to_tensor %m restrict` for inputs, `materialize_in_destination .. restrict
//! writable` for results, `llvm.emit_c_interface`), so after inlining and bufferization
//! results are written straight into caller-allocated buffers. The packed wrapper of
//! `_mlir_ciface_jaxrepl_entry` (`void(void**)`) is looked up once; `execute` passes it pointers to
//! ranked memref descriptors built as i64 words.
//!
//! Donated arguments that alias an output (`tf.aliasing_output`) are written in place:
//! the entry has no `%out` parameter for that output and computes it in the argument's
//! memref (see `with_entry`).
//!
//! Invariants: an `Executable` only exists with its live code and a non-null entry; every
//! execution checks argument count, shapes and dtypes first (compiled code trusts them);
//! outputs are fresh (pooled, unzeroed: compiled code writes every byte) or given
//! buffers; inputs are never written, except a donated buffer handed over as its aliased
//! output's destination.

mod alloc;
mod analysis;
mod gemm;
mod inplace;
mod inspect;
mod memcpy;
mod orc;
pub use orc::live_code_count;
pub mod parallel;
pub(crate) mod callbacks;
pub mod context;
pub mod persistent;
mod tiered;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_approx;

pub use analysis::{cost_analysis, memory_analysis, CostAnalysis, MemoryAnalysis};
pub use inspect::{diff_passes, split_pipeline, temp_bytes, PassDiff, PassDiffs};
pub use tiered::{compile_tiered, HEAVY_ELEMENTS, TIER1_OPT_LEVEL};
pub(crate) use tiered::compile_persistent_tiered;

use crate::error::Error;
use crate::ir::ShapedArray;
use crate::lower::{memref_of, LoweredModule};
use crate::runtime::Buffer;
use context::{context, run_pipeline, translate_to_llvm_ir, Diagnostics, Engine};
use melior::ir::operation::OperationLike;
use melior::ir::{BlockLike, Module};
use smallvec::SmallVec;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the destination-passing entry function the compile stage adds.
pub const ENTRY: &str = "jaxrepl_entry";

/// Options of `compile`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// LLVM optimisation level 0–3 (default 2; O3 costs the same and ran no faster).
    pub opt_level: u8,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { opt_level: 2 }
    }
}

/// Wall-clock seconds of each compile step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompileTimes {
    /// Parsing the module text (with the entry wrapper).
    pub parse: f64,
    /// Both pass pipelines (tensors → loops → LLVM dialect).
    pub passes: f64,
    /// In the shared JIT (`orc`): translation to LLVM IR, LLVM's optimisation passes and
    /// code generation to an object; with an ExecutionEngine (`JAXREPL_SHARED_JIT=0`),
    /// `mlirExecutionEngineCreate` (translation and LLVM's optimisation passes).
    pub engine: f64,
    /// In the shared JIT: linking the object and looking up the entry; with an
    /// ExecutionEngine: symbol registration, `Initialize` and the first lookup (ORC's lazy
    /// code generation and link).
    pub codegen: f64,
}

impl CompileTimes {
    /// Sum of all steps, in seconds.
    pub fn total(&self) -> f64 {
        self.parse + self.passes + self.engine + self.codegen
    }
}

type PackedFn = unsafe extern "C" fn(*mut *mut c_void);

/// A compiled computation: owns its native code (in the shared JIT, an ExecutionEngine
/// or a loaded cache entry) and the looked-up entry.
pub struct Executable {
    /// Owns the compiled code `entry` points into; only ever dropped (after every call).
    #[allow(dead_code)]
    code: Code,
    entry: PackedFn,
    in_avals: Vec<ShapedArray>,
    out_avals: Vec<ShapedArray>,
    const_args: Vec<Arc<Buffer>>,
    /// Per user argument: the output the entry writes into that argument's buffer.
    aliases: Vec<Option<usize>>,
    /// Per output: the user argument aliasing it (the inverse of `aliases`).
    out_from_arg: Vec<Option<usize>>,
    /// Per user argument: whether the module donates it to an output
    /// (`tf.aliasing_output`), even if compiled without the alias.
    donated: Vec<bool>,
    /// The parsed source (the lowered module with the entry wrapper), from which
    /// `optimized_ir` is recomputed on demand.
    src: String,
    /// The module after `PIPELINE_TO_LOOPS`, printed on first request (printing it in
    /// every compile cost up to a twentieth of the compile).
    optimized_ir: std::sync::OnceLock<String>,
    /// The LLVM-dialect module, for `llvm_ir()`; created in and destroyed under the
    /// process context's lock.
    llvm_module: Option<Module<'static>>,
    times: CompileTimes,
    /// LLVM optimisation level this engine was built at.
    opt_level: u8,
    /// For a tier-1 executable: the optimised tier, compiled in the background
    /// (`tiered`); `execute` forwards to it once ready.
    upgrade: Option<Arc<tiered::Upgrade>>,
    /// Executions of this engine's code.
    runs: AtomicU64,
    /// Whether executions are timed into `last_run_ns` (`time_runs`).
    timed: std::sync::atomic::AtomicBool,
    /// Wall time of the latest timed execution in ns (0: none yet).
    last_run_ns: AtomicU64,
    /// Wall time of the fastest timed execution in ns (`u64::MAX`: none yet): its cost
    /// without the preemptions a loaded machine adds to some runs.
    best_run_ns: AtomicU64,
    /// `jit(<name>)` from the module's name: the allocation site of its outputs and the
    /// name of its executions in profiles.
    name: String,
    site: crate::runtime::memory::SiteId,
    /// The object file of the compiled code and the symbol of its packed entry, kept for
    /// the persistent compilation cache (compiled with `keep_object`; taken when the entry
    /// is written).
    pub(crate) object: Option<(Vec<u8>, String)>,
    /// Compiled by the parallel (OpenMP) pipeline: its code calls libomp.
    parallel: bool,
}

/// What owns an executable's native code (held only to keep it alive).
#[allow(dead_code)]
enum Code {
    /// Compiled in this process by MLIR's ExecutionEngine.
    Engine(Engine),
    /// Linked from a persistent compilation cache entry.
    Loaded(orc::LoadedCode),
    /// Compiled into the process-wide JIT (`orc::compile_object`).
    Shared(orc::JitCode),
}

// SAFETY: the engine's compiled functions are plain reentrant code (no global state; the
// callback symbols keep their state per thread), the entry pointer is looked up once
// before the Executable is shared, and the engine is only destroyed by Drop, which Rust
// ownership orders after every `execute`. The MLIR module is only touched under the
// process-wide context lock.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

/// Per user argument of `m`: the output whose buffer it donates to, read from the
/// `{tf.aliasing_output = k : i32}` attributes of `@main`'s parameters.
fn parse_aliases(m: &LoweredModule) -> Vec<Option<usize>> {
    let header = m.text.lines().find(|l| l.contains("func.func public @main(")).unwrap_or("");
    (0..m.in_avals.len())
        .map(|i| {
            let key = format!("%arg{i}: {} {{tf.aliasing_output = ", m.in_avals[i].mlir_tensor());
            let at = header.find(&key)? + key.len();
            let k: usize = header[at..].split(' ').next()?.parse().ok()?;
            (k < m.out_avals.len()).then_some(k)
        })
        .collect()
}

/// Wraps `@main` in the destination-passing entry and makes `@main` private.
///
/// An output `k` that a donated argument aliases (`aliases`) has no `%out` parameter: it
/// is written into that argument's memref. The argument is read through
/// `to_tensor .. restrict writable`, the result is materialized in that tensor
/// (`materialize_in_destination %r in %t`), and the resulting buffer is copied into the
/// argument's memref. One-shot bufferization decides on tensor semantics whether the
/// result can be computed in the argument's buffer (elementwise code can: each element is
/// read before it is written); when it can, the final copy is a self-copy that
/// canonicalization removes, and when it cannot (the argument is still read after the
/// result is produced), the result goes to a temporary and is copied in at the end.
fn with_entry(m: &LoweredModule, aliases: &[Option<usize>]) -> Result<String, Error> {
    let text = m.text.trim_end();
    let body_end = text.rfind('}').ok_or_else(|| Error::compile("module text has no closing brace"))?;
    if !text.contains("func.func public @main(") {
        return Err(Error::compile("module has no `func.func public @main`"));
    }
    let nc = m.const_args.len();
    let ins: Vec<String> = m.const_args.iter().map(|b| b.aval().mlir_tensor()).chain(m.in_avals.iter().map(|a| a.mlir_tensor())).collect();
    let outs: Vec<String> = m.out_avals.iter().map(|a| a.mlir_tensor()).collect();
    // Output k -> the entry parameter index of the argument it is written into.
    let mut out_into: Vec<Option<usize>> = vec![None; outs.len()];
    for (i, a) in aliases.iter().enumerate() {
        if let Some(k) = *a {
            out_into[k] = Some(nc + i);
        }
    }
    let mut params: Vec<String> = ins.iter().enumerate().map(|(i, t)| format!("%in{i}: {}", memref_of(t))).collect();
    params.extend(outs.iter().enumerate().filter(|(k, _)| out_into[*k].is_none()).map(|(i, t)| format!("%out{i}: {}", memref_of(t))));
    let mut s = format!("  func.func @{ENTRY}({}) attributes {{llvm.emit_c_interface{}}} {{\n", params.join(", "), vector_width_attr());
    for (i, t) in ins.iter().enumerate() {
        let writable = if out_into.contains(&Some(i)) { " writable" } else { "" };
        s.push_str(&format!("    %t{i} = bufferization.to_tensor %in{i} restrict{writable} : {} to {t}\n", memref_of(t)));
    }
    let args: Vec<String> = (0..ins.len()).map(|i| format!("%t{i}")).collect();
    let call = format!("func.call @main({}) : ({}) -> ({})", args.join(", "), ins.join(", "), outs.join(", "));
    match outs.len() {
        0 => s.push_str(&format!("    {call}\n")),
        n => s.push_str(&format!("    %r:{n} = {call}\n")),
    }
    for (i, t) in outs.iter().enumerate() {
        match out_into[i] {
            None => s.push_str(&format!(
                "    bufferization.materialize_in_destination %r#{i} in restrict writable %out{i} : ({t}, {}) -> ()\n",
                memref_of(t)
            )),
            Some(p) => {
                let mt = memref_of(t);
                s.push_str(&format!("    %w{i} = bufferization.materialize_in_destination %r#{i} in %t{p} : ({t}, {t}) -> {t}\n"));
                s.push_str(&format!("    %wm{i} = bufferization.to_buffer %w{i} : {t} to {mt}\n"));
                s.push_str(&format!("    memref.copy %wm{i}, %in{p} : {mt} to {mt}\n"));
            }
        }
    }
    s.push_str("    return\n  }\n");
    let head = text[..body_end].replacen("func.func public @main(", "func.func private @main(", 1);
    Ok(format!("{head}{s}}}\n"))
}

/// Compiles `module`: parses it with the entry wrapper, runs the pass pipelines, compiles
/// the LLVM-dialect module at `opts.opt_level` into the shared JIT (`orc::compile_object`;
/// runtime symbols are defined there once) and looks up the entry once.
///
/// Errors (`ErrorKind::Compile`): the text does not parse, a pass fails (message carries
/// MLIR's diagnostics), the engine cannot be created, or the entry cannot be found.
pub fn compile(module: &LoweredModule, opts: &CompileOptions) -> Result<Executable, Error> {
    compile_in(module, opts, false, false)
}

/// `compile`, in the background context (`context::background_context`, for the tier-2
/// worker; the executable then keeps no LLVM-dialect module) or the process context.
/// `keep_object`: compile position-independent code and keep its object file
/// (`Executable::object`) for the persistent compilation cache.
pub(crate) fn compile_in(module: &LoweredModule, opts: &CompileOptions, background: bool, keep_object: bool) -> Result<Executable, Error> {
    let aliases = parse_aliases(module);
    let r = match compile_with(module, opts, aliases.clone(), background, keep_object) {
        // Bufferization refuses to compute an aliased output in its argument's buffer
        // when that would overwrite values still needed (two donated arguments whose
        // outputs read each other, say): donation is a hint, so compile without aliasing
        // (outputs get fresh buffers).
        // (Any failure is retried: an unrelated error recurs and is returned.)
        Err(_) if aliases.iter().any(Option::is_some) => {
            compile_with(module, opts, vec![None; aliases.len()], background, keep_object)
        }
        r => r,
    };
    r.map(|mut e| {
        e.donated = aliases.iter().map(Option::is_some).collect();
        e
    })
}

/// Compiles on all cores when the module has large loop nests (`parallel`), falling back
/// to the single-threaded pipelines when that path tags nothing or fails.
fn compile_with(module: &LoweredModule, opts: &CompileOptions, aliases: Vec<Option<usize>>, background: bool, keep_object: bool) -> Result<Executable, Error> {
    if parallel::wants_parallel(&module.text) {
        match compile_impl(module, opts, aliases.clone(), background, true, keep_object) {
            Ok(Some(e)) => return Ok(e),
            r => {
                if std::env::var_os("JAXREPL_DEBUG_PARALLEL").is_some() {
                    eprintln!("parallel compile not used: {:?}", r.err());
                }
            }
        }
    }
    compile_impl(module, opts, aliases, background, false, keep_object).map(|e| e.expect("serial compiles always give an executable"))
}

/// Removes the transform schedule (`transform.named_sequence` ops) from `m`'s body.
fn drop_transform_ops(m: &Module) {
    let mut op = m.body().first_operation();
    while let Some(o) = op {
        op = o.next_in_block();
        if o.name().as_string_ref().as_str().is_ok_and(|n| n.starts_with("transform.")) {
            // SAFETY: `o` is an op of `m`'s body, detached and destroyed once; `op`
            // already points past it.
            unsafe {
                mlir_sys::mlirOperationRemoveFromParent(o.to_raw());
                mlir_sys::mlirOperationDestroy(o.to_raw());
            }
        }
    }
}

/// One compile; with `par`, the multi-threaded path of `parallel`, which gives `Ok(None)`
/// when no loop nest is large enough to split (its optimized IR is kept, since
/// `optimized_ir()` would otherwise recompute the single-threaded pipeline's).
fn compile_impl(module: &LoweredModule, opts: &CompileOptions, aliases: Vec<Option<usize>>, background: bool, par: bool, keep_object: bool) -> Result<Option<Executable>, Error> {
    let src = with_entry(module, &aliases)?;
    let guard = if background { context::background_context() } else { context() };
    let ctx = &guard.ctx;
    let diags = Diagnostics::capture(ctx);
    let mut t = CompileTimes::default();

    let t0 = Instant::now();
    let mut m = Module::parse(ctx, &src).ok_or_else(|| diags.error("the lowered module does not parse"))?;
    t.parse = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let optimized_ir = std::sync::OnceLock::new();
    if par {
        run_pipeline(ctx, &mut m, parallel::PIPELINE_FUSE, &diags)?;
        inplace::loop_carries_in_place(&m);
        let (tagged, k) = parallel::tag_parallel(&m.as_operation().to_string(), parallel::num_threads());
        if k == 0 {
            return Ok(None);
        }
        m = Module::parse(ctx, &tagged).ok_or_else(|| diags.error("the tagged module does not parse"))?;
        run_pipeline(ctx, &mut m, "builtin.module(transform-interpreter)", &diags)?;
        drop_transform_ops(&m);
        run_pipeline(ctx, &mut m, parallel::PIPELINE_PAR_TO_LOOPS, &diags)?;
        inplace::outputs_in_place(&m);
        let _ = optimized_ir.set(m.as_operation().to_string());
        context::run_to_llvm(ctx, &mut m, parallel::PIPELINE_PAR_TO_LLVM, &src, &diags)?;
    } else {
        context::run_to_loops(ctx, &mut m, &diags)?;
        context::run_to_llvm(ctx, &mut m, context::PIPELINE_TO_LLVM, &src, &diags)?;
    }
    context::fuse_multiply_adds(ctx, &m);
    t.passes = t1.elapsed().as_secs_f64();

    let (code, entry, object) = if shared_jit_enabled() && orc::available() {
        // The process-wide JIT (no per-executable target machine or LLJIT).
        let libomp = par.then_some(parallel::LIBOMP);
        let c = orc::compile_object(&m, opts.opt_level, &format!("_mlir_ciface_{ENTRY}"), libomp, keep_object, background).map_err(|e| diags.error(&e))?;
        if par {
            parallel::configure_libomp();
        }
        t.engine = c.emit_secs;
        t.codegen = c.link_secs;
        // SAFETY: the packed wrapper has the signature `void(void**)`; `code` keeps it alive.
        let entry = unsafe { std::mem::transmute::<*mut c_void, PackedFn>(c.entry) };
        (Code::Shared(c.code), entry, c.object)
    } else {
        let t2 = Instant::now();
        let libs: &[&str] = if par { &[parallel::LIBOMP] } else { &[] };
        let engine = Engine::create(&m, opts.opt_level, libs, keep_object).map_err(|e| diags.error(&e))?;
        if par {
            parallel::configure_libomp();
        }
        t.engine = t2.elapsed().as_secs_f64();

        let t3 = Instant::now();
        for (name, ptr) in runtime_symbols() {
            // SAFETY: `symbols()` pairs each name with the extern "C" fn of the signature
            // the lowering declares for it; they are plain functions, valid forever.
            unsafe { engine.register_symbol(&name, ptr) };
        }
        engine.initialize();
        let ptr = engine.lookup_packed(&format!("_mlir_ciface_{ENTRY}"));
        if ptr.is_null() {
            return Err(diags.error("the compiled entry `_mlir_ciface_jaxrepl_entry` was not found (unresolved symbols?)"));
        }
        // SAFETY: a packed MLIR wrapper has the signature `void(void**)`.
        let entry: PackedFn = unsafe { std::mem::transmute::<*mut c_void, PackedFn>(ptr) };
        t.codegen = t3.elapsed().as_secs_f64();
        // The object is read back only for the cache; a failure just leaves it out.
        let object = keep_object.then(|| persistent::read_object(&engine)).flatten().map(|o| (o, PACKED_ENTRY.to_string()));
        (Code::Engine(engine), entry, object)
    };
    if compile_times_env() {
        eprintln!(
            "jaxrepl compile {} O{}{}: parse {:.2} passes {:.2} engine {:.2} codegen {:.2} total {:.2} ms",
            display_name(&module.text),
            opts.opt_level,
            if background { " (background)" } else { "" },
            t.parse * 1e3,
            t.passes * 1e3,
            t.engine * 1e3,
            t.codegen * 1e3,
            t.total() * 1e3
        );
    }

    // SAFETY: the module lives in the process-wide context, which is never dropped, and is
    // only used or destroyed while that context's lock is held. A background compile's
    // module is destroyed here, under the background context's lock (its tier-1
    // executable keeps the same LLVM-dialect module).
    let llvm_module = if background {
        drop(m);
        None
    } else {
        Some(unsafe { std::mem::transmute::<Module<'_>, Module<'static>>(m) })
    };
    drop(diags);
    drop(guard);
    Ok(Some(Executable {
        code,
        entry,
        in_avals: module.in_avals.clone(),
        out_avals: module.out_avals.clone(),
        const_args: module.const_args.clone(),
        out_from_arg: (0..module.out_avals.len()).map(|k| aliases.iter().position(|a| *a == Some(k))).collect(),
        donated: aliases.iter().map(Option::is_some).collect(),
        aliases,
        src,
        optimized_ir,
        llvm_module,
        times: t,
        opt_level: opts.opt_level,
        upgrade: None,
        runs: AtomicU64::new(0),
        timed: std::sync::atomic::AtomicBool::new(false),
        last_run_ns: AtomicU64::new(0),
        best_run_ns: AtomicU64::new(u64::MAX),
        site: crate::runtime::memory::site_id(&display_name(&module.text)),
        name: display_name(&module.text),
        object,
        parallel: par,
    }))
}

/// Whether the environment variable `JAXREPL_COMPILE_TIMES` is set (read once): every
/// compile then prints its stage split (`CompileTimes`, ms) to stderr, for measuring
/// first-call latency.
fn compile_times_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("JAXREPL_COMPILE_TIMES").is_some())
}

/// The packed entry's symbol in an object compiled by MLIR's ExecutionEngine (persistent
/// cache entries written before the shared JIT, or with `JAXREPL_SHARED_JIT=0`).
pub(crate) const PACKED_ENTRY: &str = "_mlir__mlir_ciface_jaxrepl_entry";

/// Whether compiles go to the process-wide JIT (`orc::compile_object`); the environment
/// variable `JAXREPL_SHARED_JIT=0` (read once) gives every executable its own MLIR
/// ExecutionEngine instead, for A/B measurements.
pub(crate) fn shared_jit_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("JAXREPL_SHARED_JIT").map_or(true, |v| v != "0"))
}

/// All runtime symbols compiled code may call (host callbacks, `memrefCopy`, GEMM, the
/// heap allocation functions of `memref.alloc`/`dealloc`).
pub(crate) fn runtime_symbols() -> Vec<(String, *mut c_void)> {
    callbacks::symbols().into_iter().chain(memcpy::symbols()).chain(gemm::symbols()).chain(alloc::symbols()).collect()
}

/// An executable for `module` whose native code is `object` (a persistent compilation
/// cache entry compiled from the same module, with these `aliases`): linked by ORC, no
/// MLIR pipeline or LLVM optimisation runs. `parallel`: the code calls libomp. `times`:
/// `codegen` is the link time, the rest 0. Errors (`Compile`): the object does not link.
pub(crate) fn load_executable(module: &LoweredModule, aliases: Vec<Option<usize>>, opt_level: u8, object: &[u8], entry: &str, parallel: bool) -> Result<Executable, Error> {
    let src = with_entry(module, &aliases)?;
    let t0 = Instant::now();
    let libomp = parallel.then_some(parallel::LIBOMP);
    let (code, ptr) = orc::load_object(object, &runtime_symbols(), libomp, entry).map_err(Error::compile)?;
    if parallel {
        parallel::configure_libomp();
    }
    // SAFETY: the packed MLIR wrapper `_mlir__mlir_ciface_jaxrepl_entry` has the signature
    // `void(void**)`; `code` keeps it alive as long as the Executable.
    let entry: PackedFn = unsafe { std::mem::transmute::<*mut c_void, PackedFn>(ptr) };
    let times = CompileTimes { codegen: t0.elapsed().as_secs_f64(), ..CompileTimes::default() };
    Ok(Executable {
        code: Code::Loaded(code),
        entry,
        in_avals: module.in_avals.clone(),
        out_avals: module.out_avals.clone(),
        const_args: module.const_args.clone(),
        out_from_arg: (0..module.out_avals.len()).map(|k| aliases.iter().position(|a| *a == Some(k))).collect(),
        donated: parse_aliases(module).iter().map(Option::is_some).collect(),
        aliases,
        src,
        optimized_ir: std::sync::OnceLock::new(),
        llvm_module: None,
        times,
        opt_level,
        upgrade: None,
        runs: AtomicU64::new(0),
        timed: std::sync::atomic::AtomicBool::new(false),
        last_run_ns: AtomicU64::new(0),
        best_run_ns: AtomicU64::new(u64::MAX),
        site: crate::runtime::memory::site_id(&display_name(&module.text)),
        name: display_name(&module.text),
        object: None,
        parallel,
    })
}

/// The symbol name of `module @jit_f ...` (`jit_f`); empty for an unnamed module.
pub(crate) fn module_symbol(text: &str) -> &str {
    text.split_once("module @")
        .map(|(_, r)| r.split(|c: char| c.is_whitespace() || c == '{').next().unwrap_or(""))
        .unwrap_or("")
}

/// `jit(f)` for a module `module @jit_f ...` (the name as `%profile`, the memory
/// profile and compile progress lines show it).
pub fn display_name(text: &str) -> String {
    let name = module_symbol(text);
    match name.strip_prefix("jit_") {
        // A closure's module (`@jit__lambda`, JAX's name for a lambda).
        Some("_lambda") => format!("jit({})", crate::transform::jit::LAMBDA),
        Some(n) => format!("jit({n})"),
        None if name.is_empty() => "jit(main)".to_string(),
        None => name.to_string(),
    }
}

/// An argument of `Executable::execute_args`.
pub enum ArgBuf<'a> {
    /// Read only.
    Borrowed(&'a Buffer),
    /// Given up by the caller: reused as the output the argument aliases, if any.
    Donated(Buffer),
    /// Placeholder left after a donated buffer was moved to its output (internal).
    #[doc(hidden)]
    Taken,
}

impl ArgBuf<'_> {
    fn get(&self) -> &Buffer {
        match self {
            ArgBuf::Borrowed(b) => b,
            ArgBuf::Donated(b) => b,
            ArgBuf::Taken => panic!("argument buffer already moved to its output"),
        }
    }
}

/// Appends the ranked memref descriptor of a dense row-major buffer to `d`, as words:
/// `[alloc, aligned, offset=0, sizes.., strides..]`.
fn push_descriptor(d: &mut SmallVec<[i64; 96]>, b: &Buffer) {
    let shape = b.shape();
    let p = b.as_ptr() as i64;
    d.extend_from_slice(&[p, p, 0]);
    d.extend(shape.iter().map(|&s| s as i64));
    let at = d.len();
    d.extend(std::iter::repeat_n(0, shape.len()));
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        d[at + i] = acc;
        acc *= shape[i] as i64;
    }
}

impl Executable {
    /// Runs on host buffers: `args` are the user's arguments (avals `in_avals()`), the
    /// large-constant parameters are passed first internally. Returns fresh output buffers
    /// (avals `out_avals()`, weak flag dropped).
    ///
    /// Errors: `ErrorKind::Type` when the number, shapes or dtypes of `args` differ from
    /// those compiled for (the message lists every mismatch, JAX-style);
    /// `ErrorKind::Runtime` when a host callback failed during the run.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>, Error> {
        let mut a: SmallVec<[ArgBuf<'_>; 8]> = args.iter().map(|b| ArgBuf::Borrowed(b)).collect();
        self.execute_args(&mut a)
    }

    /// Per user argument: the output that the compiled entry writes into the argument's
    /// own buffer (the module was lowered with that argument donated, and bufferization
    /// found an order that computes the output in place).
    pub fn aliases(&self) -> &[Option<usize>] {
        &self.aliases
    }

    /// Per user argument: whether the lowered module donates it to an output
    /// (`tf.aliasing_output`); a call deletes such arguments, whether or not the output
    /// could be computed in place (`aliases`).
    pub fn donated_args(&self) -> &[bool] {
        &self.donated
    }

    /// As `execute`, with arguments that may be given up: a `ArgBuf::Donated` buffer of an
    /// argument that aliases an output (`aliases()`) becomes that output, computed in
    /// place. An aliased output whose argument is only borrowed is computed in a copy of
    /// the argument (borrowed inputs are never written). Donated buffers that alias no
    /// output are dropped after the run.
    ///
    /// Errors: as `execute`.
    pub fn execute_args(&self, args: &mut [ArgBuf<'_>]) -> Result<Vec<Buffer>, Error> {
        self.execute_args_small(args).map(SmallVec::into_vec)
    }

    /// Times every later execution (wall time into `last_run`; two clock reads a call).
    /// Set for executables whose running time decides where they run (a jitted `scan`).
    pub(crate) fn time_runs(&self) {
        self.timed.store(true, Ordering::Relaxed);
    }

    /// Wall time of the latest execution since `time_runs`, of whichever tier ran;
    /// `None` before one.
    pub(crate) fn last_run(&self) -> Option<Duration> {
        match self.last_run_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Wall time of the fastest execution since `time_runs` (what the code costs when
    /// its thread is not preempted); `None` before one.
    pub(crate) fn best_run(&self) -> Option<Duration> {
        match self.best_run_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// `execute_args` returning the outputs inline (no allocation for up to 4).
    pub(crate) fn execute_args_small(&self, args: &mut [ArgBuf<'_>]) -> Result<SmallVec<[Buffer; 4]>, Error> {
        if self.timed.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            let r = self.execute_untimed(args);
            let ns = (t0.elapsed().as_nanos() as u64).max(1);
            self.last_run_ns.store(ns, Ordering::Relaxed);
            self.best_run_ns.fetch_min(ns, Ordering::Relaxed);
            return r;
        }
        self.execute_untimed(args)
    }

    fn execute_untimed(&self, args: &mut [ArgBuf<'_>]) -> Result<SmallVec<[Buffer; 4]>, Error> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        if let Some(up) = &self.upgrade {
            if let Some(e2) = up.ready.get() {
                self.runs.fetch_sub(1, Ordering::Relaxed);
                return e2.execute_args_small(args);
            }
            // The second execution asks for the optimised tier.
            if n >= 1 {
                up.request();
            }
        }
        let _span = crate::profiler::span("execute", || self.name.clone());
        {
            let refs: SmallVec<[&Buffer; 8]> = args.iter().map(ArgBuf::get).collect();
            self.check_args(&refs)?;
        }
        // Aliased outputs live in their argument's buffer: the donated buffer itself, or a
        // private copy of a borrowed argument.
        let mut outs: SmallVec<[Buffer; 4]> = SmallVec::with_capacity(self.out_avals.len());
        for (k, a) in self.out_avals.iter().enumerate() {
            outs.push(match self.out_from_arg[k] {
                None => Buffer::for_output(a, self.site)?,
                Some(i) => match std::mem::replace(&mut args[i], ArgBuf::Taken) {
                    ArgBuf::Donated(b) => b,
                    other => {
                        let mut c = Buffer::for_output(a, self.site)?;
                        c.bytes_mut().copy_from_slice(other.get().bytes());
                        c
                    }
                },
            });
        }
        let mut words: SmallVec<[i64; 96]> = SmallVec::new();
        let mut starts: SmallVec<[usize; 16]> = SmallVec::new();
        for b in self.const_args.iter().map(|b| b.as_ref()) {
            starts.push(words.len());
            push_descriptor(&mut words, b);
        }
        let nc = self.const_args.len();
        for (i, b) in args.iter().enumerate() {
            starts.push(words.len());
            match self.aliases[i] {
                // The argument is read and written in its output's buffer.
                Some(k) => push_descriptor(&mut words, &outs[k]),
                None => push_descriptor(&mut words, b.get()),
            }
        }
        for (k, b) in outs.iter().enumerate() {
            if self.out_from_arg[k].is_none() {
                starts.push(words.len());
                push_descriptor(&mut words, b);
            }
        }
        debug_assert!(starts.len() >= nc);
        let base = words.as_mut_ptr();
        // SAFETY: every start is an index into `words`, which is not resized below.
        let mut ptrs: SmallVec<[*mut c_void; 16]> = starts.iter().map(|&s| unsafe { base.add(s) } as *mut c_void).collect();
        let mut argv: SmallVec<[*mut c_void; 16]> =
            ptrs.iter_mut().map(|p| p as *mut *mut c_void as *mut c_void).collect();
        callbacks::begin();
        // SAFETY: argv holds one pointer per entry parameter, each to a pointer to a live
        // descriptor of the compiled shape (checked above); outputs are fresh buffers or,
        // for aliased outputs, buffers this call owns holding the argument (the entry
        // reads them as the argument; bufferization orders reads before writes).
        unsafe { (self.entry)(argv.as_mut_ptr()) };
        callbacks::finish()?;
        Ok(outs)
    }

    fn check_args(&self, args: &[&Buffer]) -> Result<(), Error> {
        if args.len() != self.in_avals.len() {
            return Err(Error::type_error(format!(
                "Compiled function called with {} arguments, but it was compiled for {}",
                args.len(),
                self.in_avals.len()
            )));
        }
        let bad: Vec<String> = args
            .iter()
            .zip(&self.in_avals)
            .enumerate()
            .filter(|(_, (b, a))| b.shape() != a.shape.as_slice() || b.dtype() != a.dtype)
            .map(|(i, (b, a))| format!("Argument {i} compiled with {} and called with {}", a.strong().long(), b.aval().long()))
            .collect();
        if bad.is_empty() {
            return Ok(());
        }
        Err(Error::type_error(format!(
            "Argument types differ from the types for which this computation was compiled. The mismatches are:\n{}",
            bad.join("\n")
        )))
    }

    /// Avals of the user's arguments `execute` expects.
    pub fn in_avals(&self) -> &[ShapedArray] {
        &self.in_avals
    }
    /// Avals of the results `execute` returns.
    pub fn out_avals(&self) -> &[ShapedArray] {
        &self.out_avals
    }
    /// The module after bufferization and conversion to loops, before conversion to the
    /// LLVM dialect (what `Compiled.as_text()` shows).
    /// Computed on first request (the loop pipeline is rerun on the kept source, under the
    /// process context's lock; it is deterministic, so this is the module that was
    /// compiled, for either tier). Should that rerun fail, the text is an MLIR comment
    /// with the error.
    pub fn optimized_ir(&self) -> &str {
        self.optimized_ir.get_or_init(|| {
            let guard = context();
            let diags = Diagnostics::capture(&guard.ctx);
            let r = Module::parse(&guard.ctx, &self.src)
                .ok_or_else(|| diags.error("the lowered module does not parse"))
                .and_then(|mut m| {
                    context::run_to_loops(&guard.ctx, &mut m, &diags)?;
                    Ok(m.as_operation().to_string())
                });
            r.unwrap_or_else(|e| format!("// optimized IR unavailable: {e}\n"))
        })
    }
    /// The LLVM IR of the compiled module (before LLVM's own optimisation passes).
    /// Errors (`ErrorKind::Compile`) if translation fails.
    pub fn llvm_ir(&self) -> Result<String, Error> {
        self.with_llvm_module(translate_to_llvm_ir)
    }

    /// Runs `f` on this executable's LLVM-dialect module under the process context's
    /// lock: the kept one, or (an executable linked from the persistent compilation cache
    /// keeps none) one rebuilt from the kept source with the serial pipelines: the same
    /// MLIR, except that a parallel module's OpenMP regions are not rebuilt.
    pub(crate) fn with_llvm_module<T>(&self, f: impl FnOnce(&Module<'_>, &Diagnostics<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let guard = context();
        let diags = Diagnostics::capture(&guard.ctx);
        if let Some(m) = &self.llvm_module {
            return f(m, &diags);
        }
        let mut m = Module::parse(&guard.ctx, &self.src).ok_or_else(|| diags.error("the lowered module does not parse"))?;
        context::run_to_loops(&guard.ctx, &mut m, &diags)?;
        context::run_to_llvm(&guard.ctx, &mut m, context::PIPELINE_TO_LLVM, &self.src, &diags)?;
        context::fuse_multiply_adds(&guard.ctx, &m);
        f(&m, &diags)
    }
    /// Seconds spent in each compile step (of the first tier for a tiered executable).
    pub fn times(&self) -> &CompileTimes {
        &self.times
    }

    /// Which tier runs now: 1 for a tiered executable whose optimised tier is not ready
    /// (LLVM `TIER1_OPT_LEVEL`), else 2 (LLVM at the requested level).
    pub fn tier(&self) -> u8 {
        match &self.upgrade {
            Some(up) if up.ready.get().is_none() => 1,
            _ => 2,
        }
    }

    /// The LLVM optimisation level of the code that runs now.
    pub fn running_opt_level(&self) -> u8 {
        match self.upgrade.as_ref().and_then(|u| u.ready.get()) {
            Some(e2) => e2.opt_level,
            None => self.opt_level,
        }
    }

    /// Executions so far as `(tier 1, tier 2)`; a non-tiered executable counts as tier 2.
    pub fn tier_runs(&self) -> (u64, u64) {
        let own = self.runs.load(Ordering::Relaxed);
        match &self.upgrade {
            None => (0, own),
            Some(up) => (own, up.ready.get().map_or(0, |e2| e2.runs.load(Ordering::Relaxed))),
        }
    }

    /// Queues the optimised tier's background compile now (normally the second execution
    /// does). No effect on an executable that is not tier 1 or already queued.
    pub fn request_upgrade(&self) {
        if let Some(up) = &self.upgrade {
            up.request();
        }
    }

    /// Requests the optimised tier and waits up to `timeout` for it; whether tier 2 runs
    /// now. Does not wait for a non-tiered executable (true).
    pub fn wait_upgraded(&self, timeout: Duration) -> bool {
        match &self.upgrade {
            None => true,
            Some(up) => {
                up.request();
                up.wait(timeout)
            }
        }
    }

    /// Why the optimised tier failed to compile, if it did (tier 1 keeps running).
    pub fn upgrade_error(&self) -> Option<String> {
        self.upgrade.as_ref().and_then(|u| u.error())
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        if let Some(m) = self.llvm_module.take() {
            let _guard = context();
            drop(m);
        }
    }
}

/// `, passthrough = [["prefer-vector-width", "<w>"]]` for the entry function (and so for
/// `@main` inlined into it and the OpenMP regions outlined from it): LLVM tunes Intel AVX-512
/// hosts for 256-bit vectors by default; with 512 its loop vectoriser uses zmm registers.
/// Measured on this machine (2 cores, AVX-512, `codegen_probe`, CPU time per call, best
/// of 3 under load): softmax f32[4096,1024] 6.0–6.4 ms against 7.6–8.9, log f32[1e7] 8.9
/// against 10.0, erf 36 against 40, sum 2.2–2.5 against 2.8–4.4, tanh chain 8.4 against 8.9.
/// The environment variable `JAXREPL_PREFER_VECTOR_WIDTH` (read once per process) sets
/// another width in bits; `0` leaves LLVM's default (no attribute).
fn vector_width_attr() -> &'static str {
    static A: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    A.get_or_init(|| match std::env::var("JAXREPL_PREFER_VECTOR_WIDTH").ok().map_or(Some(512), |v| v.parse::<u32>().ok()) {
        Some(w) if w > 0 => format!(", passthrough = [[\"prefer-vector-width\", \"{w}\"]]"),
        _ => String::new(),
    })
}
