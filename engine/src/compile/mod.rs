//! Compilation: a `LoweredModule` becomes native code through MLIR's pass pipelines and
//! ExecutionEngine, and runs on host buffers.
//!
//! The compile stage adds the calling convention: `@main` is made private and called from
//! `@jaxrepl_entry(memref args.., memref outs..)` in destination-passing style
//! (`bufferization.to_tensor %m restrict` for inputs, `materialize_in_destination .. restrict
//! writable` for results, `llvm.emit_c_interface`), so after inlining and bufferization
//! results are written straight into caller-allocated buffers. The packed wrapper of
//! `_mlir_ciface_jaxrepl_entry` is looked up once; `execute` passes it pointers to
//! ranked memref descriptors built as i64 words.
//!
//! Invariants: an `Executable` only exists with a live engine and a non-null entry; every
//! execution checks argument count, shapes and dtypes first (compiled code trusts them);
//! outputs are fresh buffers, inputs are never written.

mod analysis;
mod gemm;
mod inspect;
mod memcpy;
pub(crate) mod callbacks;
pub mod context;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_approx;

pub use analysis::{cost_analysis, memory_analysis, CostAnalysis, MemoryAnalysis};
pub use inspect::{diff_passes, split_pipeline, temp_bytes, PassDiff, PassDiffs};

use crate::error::Error;
use crate::ir::ShapedArray;
use crate::lower::{memref_of, LoweredModule};
use crate::runtime::Buffer;
use context::{context, run_pipeline, translate_to_llvm_ir, Diagnostics, Engine};
use melior::ir::Module;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

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
    /// `mlirExecutionEngineCreate`: translation to LLVM IR and LLVM's optimisation passes.
    pub engine: f64,
    /// Symbol registration, `Initialize` and the first lookup (ORC's lazy codegen and link).
    pub codegen: f64,
}

impl CompileTimes {
    /// Sum of all steps, in seconds.
    pub fn total(&self) -> f64 {
        self.parse + self.passes + self.engine + self.codegen
    }
}

type PackedFn = unsafe extern "C" fn(*mut *mut c_void);

/// A compiled computation: owns its ExecutionEngine and the looked-up entry.
pub struct Executable {
    engine: Engine,
    entry: PackedFn,
    in_avals: Vec<ShapedArray>,
    out_avals: Vec<ShapedArray>,
    const_args: Vec<Arc<Buffer>>,
    optimized_ir: String,
    /// The LLVM-dialect module, for `llvm_ir()`; created in and destroyed under the
    /// process context's lock.
    llvm_module: Option<Module<'static>>,
    times: CompileTimes,
}

// SAFETY: the engine's compiled functions are plain reentrant code (no global state; the
// callback symbols keep their state per thread), the entry pointer is looked up once
// before the Executable is shared, and the engine is only destroyed by Drop, which Rust
// ownership orders after every `execute`. The MLIR module is only touched under the
// process-wide context lock.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

/// Wraps `@main` in the destination-passing entry and makes `@main` private.
fn with_entry(m: &LoweredModule) -> Result<String, Error> {
    let text = m.text.trim_end();
    let body_end = text.rfind('}').ok_or_else(|| Error::compile("module text has no closing brace"))?;
    if !text.contains("func.func public @main(") {
        return Err(Error::compile("module has no `func.func public @main`"));
    }
    let ins: Vec<String> = m.const_args.iter().map(|b| b.aval().mlir_tensor()).chain(m.in_avals.iter().map(|a| a.mlir_tensor())).collect();
    let outs: Vec<String> = m.out_avals.iter().map(|a| a.mlir_tensor()).collect();
    let mut params: Vec<String> = ins.iter().enumerate().map(|(i, t)| format!("%in{i}: {}", memref_of(t))).collect();
    params.extend(outs.iter().enumerate().map(|(i, t)| format!("%out{i}: {}", memref_of(t))));
    let mut s = format!("  func.func @{ENTRY}({}) attributes {{llvm.emit_c_interface}} {{\n", params.join(", "));
    for (i, t) in ins.iter().enumerate() {
        s.push_str(&format!("    %t{i} = bufferization.to_tensor %in{i} restrict : {} to {t}\n", memref_of(t)));
    }
    let args: Vec<String> = (0..ins.len()).map(|i| format!("%t{i}")).collect();
    let call = format!("func.call @main({}) : ({}) -> ({})", args.join(", "), ins.join(", "), outs.join(", "));
    match outs.len() {
        0 => s.push_str(&format!("    {call}\n")),
        n => s.push_str(&format!("    %r:{n} = {call}\n")),
    }
    for (i, t) in outs.iter().enumerate() {
        s.push_str(&format!(
            "    bufferization.materialize_in_destination %r#{i} in restrict writable %out{i} : ({t}, {}) -> ()\n",
            memref_of(t)
        ));
    }
    s.push_str("    return\n  }\n");
    let head = text[..body_end].replacen("func.func public @main(", "func.func private @main(", 1);
    Ok(format!("{head}{s}}}\n"))
}

/// Compiles `module`: parses it with the entry wrapper, runs the pass pipelines, creates the
/// ExecutionEngine at `opts.opt_level`, registers the runtime callback symbols and looks up
/// the entry once.
///
/// Errors (`ErrorKind::Compile`): the text does not parse, a pass fails (message carries
/// MLIR's diagnostics), the engine cannot be created, or the entry cannot be found.
pub fn compile(module: &LoweredModule, opts: &CompileOptions) -> Result<Executable, Error> {
    let src = with_entry(module)?;
    let guard = context();
    let ctx = &guard.ctx;
    let diags = Diagnostics::capture(ctx);
    let mut t = CompileTimes::default();

    let t0 = Instant::now();
    let mut m = Module::parse(ctx, &src).ok_or_else(|| diags.error("the lowered module does not parse"))?;
    t.parse = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    run_pipeline(ctx, &mut m, context::PIPELINE_TO_LOOPS, &diags)?;
    let optimized_ir = m.as_operation().to_string();
    run_pipeline(ctx, &mut m, context::PIPELINE_TO_LLVM, &diags)?;
    t.passes = t1.elapsed().as_secs_f64();

    let t2 = Instant::now();
    let engine = Engine::create(&m, opts.opt_level, &[]).map_err(|e| diags.error(&e))?;
    t.engine = t2.elapsed().as_secs_f64();

    let t3 = Instant::now();
    for (name, ptr) in callbacks::symbols().into_iter().chain(memcpy::symbols()).chain(gemm::symbols()) {
        // SAFETY: `symbols()` pairs each name with the extern "C" fn of the signature the
        // lowering declares for it; they are plain functions, valid forever.
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

    // SAFETY: the module lives in the process-wide context, which is never dropped, and is
    // only used or destroyed while that context's lock is held.
    let llvm_module = Some(unsafe { std::mem::transmute::<Module<'_>, Module<'static>>(m) });
    drop(diags);
    drop(guard);
    Ok(Executable {
        engine,
        entry,
        in_avals: module.in_avals.clone(),
        out_avals: module.out_avals.clone(),
        const_args: module.const_args.clone(),
        optimized_ir,
        llvm_module,
        times: t,
    })
}

/// The ranked memref descriptor of a dense row-major buffer, as words:
/// `[alloc, aligned, offset=0, sizes.., strides..]`.
fn descriptor(b: &Buffer) -> Vec<i64> {
    let shape = b.shape();
    let p = b.as_ptr() as i64;
    let mut d = vec![p, p, 0];
    d.extend(shape.iter().map(|&s| s as i64));
    let mut strides = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i] as i64;
    }
    d.extend(strides);
    d
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
        self.execute_into(args, self.out_avals.iter().map(|_| None).collect())
    }

    /// As `execute`, writing output `k` into `dests[k]` when given (a donated input's
    /// buffer, say) instead of a fresh buffer; the given buffers are returned as the
    /// outputs. A destination must not overlap any of `args` (the compiled entry assumes
    /// inputs and outputs are distinct: pass a copy of an input whose buffer is reused).
    ///
    /// Errors: as `execute`; `ErrorKind::Type` when `dests` has the wrong length or a
    /// destination's shape or dtype differs from its output's.
    pub fn execute_into(&self, args: &[&Buffer], dests: Vec<Option<Buffer>>) -> Result<Vec<Buffer>, Error> {
        self.check_args(args)?;
        if dests.len() != self.out_avals.len() {
            return Err(Error::type_error(format!(
                "{} output destinations given for {} outputs",
                dests.len(),
                self.out_avals.len()
            )));
        }
        let outs: Vec<Buffer> = dests
            .into_iter()
            .zip(&self.out_avals)
            .map(|(d, a)| match d {
                Some(b) if b.shape() == a.shape.as_slice() && b.dtype() == a.dtype => {
                    let overlaps = args.iter().any(|x| !x.bytes().is_empty() && x.as_ptr() == b.as_ptr());
                    if overlaps {
                        Err(Error::type_error("an output destination is also an argument"))
                    } else {
                        Ok(b)
                    }
                }
                Some(b) => Err(Error::type_error(format!(
                    "output destination {} does not match output {}",
                    b.aval().long(),
                    a.strong().long()
                ))),
                None => Ok(Buffer::zeros(a)),
            })
            .collect::<Result<_, Error>>()?;
        let mut descs: Vec<Vec<i64>> = self.const_args.iter().map(|b| descriptor(b)).collect();
        descs.extend(args.iter().map(|b| descriptor(b)));
        descs.extend(outs.iter().map(descriptor));
        let mut ptrs: Vec<*mut c_void> = descs.iter_mut().map(|d| d.as_mut_ptr() as *mut c_void).collect();
        let mut argv: Vec<*mut c_void> = ptrs.iter_mut().map(|p| p as *mut *mut c_void as *mut c_void).collect();
        callbacks::begin();
        // SAFETY: argv holds one pointer per entry parameter, each to a pointer to a live
        // descriptor of the compiled shape (checked above); outputs are fresh or given
        // buffers of the output's shape that overlap no argument (checked above).
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
    pub fn optimized_ir(&self) -> &str {
        &self.optimized_ir
    }
    /// The LLVM IR of the compiled module (before LLVM's own optimisation passes).
    /// Errors (`ErrorKind::Compile`) if translation fails.
    pub fn llvm_ir(&self) -> Result<String, Error> {
        let guard = context();
        let diags = Diagnostics::capture(&guard.ctx);
        let m = self.llvm_module.as_ref().ok_or_else(|| Error::compile("no LLVM module kept"))?;
        translate_to_llvm_ir(m, &diags)
    }
    /// Seconds spent in each compile step.
    pub fn times(&self) -> &CompileTimes {
        &self.times
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
