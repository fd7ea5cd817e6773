//! The process-wide MLIR context, diagnostics capture, pass pipelines, and a checked
//! wrapper around the C API's ExecutionEngine.
//!
//! Invariants: there is exactly one MLIR `Context` per process, created lazily and only
//! ever touched while its `Mutex` is held (MLIR contexts are not thread-safe for
//! mutation; melior's `Context` is neither Send nor Sync, hence the wrapper). Every MLIR
//! object made in it (modules kept by `Executable`s) is created and destroyed under that
//! lock. A null engine or a null lookup is an `Error`, never a crash.

use crate::error::Error;
use melior::dialect::DialectRegistry;
use melior::ir::operation::OperationLike;
use melior::ir::Module;
use melior::pass::PassManager;
use melior::utility::{parse_pass_pipeline, register_all_dialects, register_all_llvm_translations, register_all_passes};
use melior::Context;
use mlir_sys::*;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The passes from tensors to loops on memrefs (their output is `optimized_ir`). `@main`
/// is private here (the compile stage made it so) and is inlined into the entry.
/// `arith-expand{include-bf16}` runs first: it rewrites bf16 casts into integer ops before
/// canonicalization can fold `truncf(uitofp x)` into a direct int→bf16 cast, which LLVM
/// would lower to the `__truncsfbf2` libcall the JIT cannot resolve.
pub const PIPELINE_TO_LOOPS: &str = "builtin.module(arith-expand{include-bf16=true},inline{default-pipeline=},symbol-dce,linalg-generalize-named-ops,linalg-fuse-elementwise-ops,\
eliminate-empty-tensors,one-shot-bufferize{allow-return-allocs-from-loops bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},\
func.func(buffer-loop-hoisting,promote-buffers-to-stack{max-alloc-size-in-bytes=1024}),buffer-deallocation-pipeline,convert-bufferization-to-memref,convert-linalg-to-loops,canonicalize,cse)";

/// The passes of [`PIPELINE_TO_LOOPS`] up to elementwise fusion, on tensors.
pub const PIPELINE_TO_LOOPS_FUSE: &str =
    "builtin.module(arith-expand{include-bf16=true},inline{default-pipeline=},symbol-dce,linalg-generalize-named-ops,linalg-fuse-elementwise-ops)";

/// The rest of [`PIPELINE_TO_LOOPS`]: bufferization and loops. `buffer-loop-hoisting`
/// (before the deallocation pipeline) moves a loop body's fixed-size temporaries that do
/// not escape an iteration (a reduction's 0-d accumulator, a matmul result read by the
/// carry update) out of the loop: one allocation per call instead of one per iteration.
/// `promote-buffers-to-stack` then turns the small ones (≤ 1 KiB, static shape, not inside
/// a loop, not escaping: a scan's 0-d sum accumulator, a small carry buffer) into
/// `memref.alloca`s: no `malloc`/`free` per call, and LLVM's SROA/mem2reg keeps a 0-d
/// accumulator in a register instead of storing it once per element (it also proves
/// the buffer distinct from the arguments, so no runtime alias check versions the loop).
pub const PIPELINE_TO_LOOPS_REST: &str = "builtin.module(eliminate-empty-tensors,one-shot-bufferize{allow-return-allocs-from-loops bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},\
func.func(buffer-loop-hoisting,promote-buffers-to-stack{max-alloc-size-in-bytes=1024}),buffer-deallocation-pipeline,convert-bufferization-to-memref,convert-linalg-to-loops,canonicalize,cse)";

/// The name `diff_passes` shows for the step between the two halves of
/// [`PIPELINE_TO_LOOPS`] (`inplace::loop_carries_in_place`, not an MLIR pass); also part of
/// the persistent cache key.
pub const LOOP_CARRIES_IN_PLACE: &str = "jaxrepl-loop-carries-in-place";

/// The name `diff_passes` shows for the step after [`PIPELINE_TO_LOOPS`] that writes
/// results straight into the output parameters (`inplace::outputs_in_place`, not an MLIR
/// pass); also part of the persistent cache key.
pub const OUTPUTS_IN_PLACE: &str = "jaxrepl-outputs-in-place";

/// Runs [`PIPELINE_TO_LOOPS`] on `module`: fusion, the in-place rewrite of loop carries
/// (`super::inplace`), then bufferization to loops, then results written straight into
/// the output parameters ([`OUTPUTS_IN_PLACE`]). Errors as [`run_pipeline`].
pub fn run_to_loops(ctx: &Context, module: &mut Module, diags: &Diagnostics) -> Result<(), Error> {
    run_pipeline(ctx, module, PIPELINE_TO_LOOPS_FUSE, diags)?;
    super::inplace::loop_carries_in_place(module);
    run_pipeline(ctx, module, PIPELINE_TO_LOOPS_REST, diags)?;
    super::inplace::outputs_in_place(module);
    Ok(())
}

/// The passes from loops on memrefs to the LLVM dialect, after [`PIPELINE_MATH_TO_FUNCS`]
/// (`run_to_llvm`). `convert-math-to-libm` catches every math op without an LLVM
/// intrinsic.
pub const PIPELINE_TO_LLVM: &str = "builtin.module(lower-affine,convert-scf-to-cf,\
expand-strided-metadata,lower-affine,finalize-memref-to-llvm{use-aligned-alloc=true use-generic-functions=true},convert-math-to-llvm,convert-math-to-libm,arith-expand{include-bf16=true},\
convert-arith-to-llvm,convert-index-to-llvm,convert-ub-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,\
reconcile-unrealized-casts)";

/// `convert-math-to-funcs`, which expands `math.ipowi` (integer `pow`) into a helper
/// function. Run before the `*_TO_LLVM` pipelines, only on modules that have the op, and
/// never from a cached pass manager (`run_pipeline`): MLIR's pass keeps the helpers it
/// created in a member map across runs, so a reused pass called a helper of an earlier,
/// destroyed module (a crash in `func::CallOp::create` at the second module with
/// `math.ipowi` in a process).
pub const PIPELINE_MATH_TO_FUNCS: &str = "builtin.module(convert-math-to-funcs)";

/// Runs [`PIPELINE_MATH_TO_FUNCS`] when `src` (the module's text before the pipelines)
/// has `math.ipowi`, then `pipeline` (`PIPELINE_TO_LLVM` or the parallel path's).
/// Errors: as `run_pipeline`.
pub fn run_to_llvm(ctx: &Context, module: &mut Module, pipeline: &str, src: &str, diags: &Diagnostics) -> Result<(), Error> {
    if src.contains("math.ipowi") {
        run_pipeline(ctx, module, PIPELINE_MATH_TO_FUNCS, diags)?;
    }
    run_pipeline(ctx, module, pipeline, diags)
}

/// The process's MLIR context. Sound to send between threads because every use goes
/// through the `Mutex` in `context()`, one thread at a time.
pub struct MlirContext {
    pub ctx: Context,
}
unsafe impl Send for MlirContext {}

impl MlirContext {
    fn new() -> MlirContext {
        // Pass registration is process-global: once, whatever the number of contexts.
        static PASSES: std::sync::Once = std::sync::Once::new();
        PASSES.call_once(register_all_passes);
        let registry = DialectRegistry::new();
        register_all_dialects(&registry);
        let ctx = Context::new_with_registry(&registry, false);
        ctx.load_all_available_dialects();
        register_all_llvm_translations(&ctx);
        process_contexts().lock().unwrap_or_else(|e| e.into_inner()).push(ctx.to_raw().ptr as usize);
        MlirContext { ctx }
    }
}

/// Locks the process-wide MLIR context (creating it on first use, ~10 ms).
pub fn context() -> MutexGuard<'static, MlirContext> {
    static CTX: OnceLock<Mutex<MlirContext>> = OnceLock::new();
    CTX.get_or_init(|| {
        super::orc::warm_up();
        Mutex::new(MlirContext::new())
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

/// Locks the background compiler's own MLIR context (tiered compilation's worker), so
/// that optimised-tier compiles never hold the process context's lock. Created on first
/// use, after the process context (the first compile is always a foreground one).
pub fn background_context() -> MutexGuard<'static, MlirContext> {
    static CTX: OnceLock<Mutex<MlirContext>> = OnceLock::new();
    CTX.get_or_init(|| {
        drop(context());
        Mutex::new(MlirContext::new())
    })
    .lock()
    .unwrap_or_else(|e| e.into_inner())
}

/// Collects the context's diagnostics while alive (and keeps them off stderr).
pub struct Diagnostics<'c> {
    ctx: &'c Context,
    id: Option<melior::diagnostic::DiagnosticHandlerId>,
    pub messages: Arc<Mutex<Vec<String>>>,
}

impl<'c> Diagnostics<'c> {
    pub fn capture(ctx: &'c Context) -> Diagnostics<'c> {
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        let id = ctx.attach_diagnostic_handler(move |d| {
            let mut s = format!("{}: {:?}: {}", d.location(), d.severity(), d);
            for i in 0..d.note_count() {
                if let Ok(n) = d.note(i) {
                    s.push_str(&format!("\n  note: {n}"));
                }
            }
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(s);
            true
        });
        Diagnostics { ctx, id: Some(id), messages }
    }
    /// The diagnostics so far, one per line ("" if none).
    pub fn text(&self) -> String {
        self.messages.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }
    /// An `ErrorKind::Compile` error: `what`, then the diagnostics.
    pub fn error(&self, what: &str) -> Error {
        let d = self.text();
        Error::compile(if d.is_empty() { what.to_string() } else { format!("{what}:\n{d}") })
    }
}

impl Drop for Diagnostics<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.ctx.detach_diagnostic_handler(id);
        }
    }
}

static PIPELINE_RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many MLIR pass pipelines this process has run (`run_pipeline` calls, every compile
/// runs at least two): a persistent compilation cache hit runs none.
pub fn pipeline_runs() -> u64 {
    PIPELINE_RUNS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The process-lifetime MLIR contexts (`context()`, `background_context()`), by raw
/// pointer: only their pass managers are cached (they are never destroyed, so a pointer
/// is never reused for another context).
fn process_contexts() -> &'static Mutex<Vec<usize>> {
    static P: OnceLock<Mutex<Vec<usize>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(Vec::new()))
}

/// A parsed pass manager kept for reuse (see [`run_pipeline`]). Only used under its
/// context's lock.
struct CachedPm(MlirPassManager);
// SAFETY: the pass manager is only run while its context's `Mutex` is held (module docs).
unsafe impl Send for CachedPm {}

/// At most this many pass managers are kept per process (the fixed pipelines of the two
/// contexts and a few `diff_passes` single-pass pipelines); later ones are built per run.
const PM_CACHE_MAX: usize = 64;

/// Pass managers by (context pointer, pipeline text).
fn pm_cache() -> &'static Mutex<std::collections::HashMap<(usize, String), CachedPm>> {
    static C: OnceLock<Mutex<std::collections::HashMap<(usize, String), CachedPm>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(std::collections::HashMap::new()))
}

/// Runs a textual pass pipeline on `module` and verifies the result once (not after every
/// pass); errors carry the diagnostics. With the environment variable
/// `JAXREPL_PASS_TIMING` set, MLIR's per-pass timing report goes to stderr (one report per
/// run; no pass manager is cached then). Transform-interpreter pipelines (the parallel
/// path's per-module schedules) are not cached either.
///
/// The pass manager of each (process context, pipeline) is parsed once and reused: a pass
/// manager initialises its passes on its first run only (the canonicalizer, for one,
/// collects and freezes the canonicalization patterns of every loaded dialect, about
/// 0.5 ms each time, four times in [`PIPELINE_TO_LOOPS_REST`]), and parsing the text is
/// skipped too. Measured: 2-3 ms less per compile (MLIR's pass timing put it under "Rest").
pub fn run_pipeline(ctx: &Context, module: &mut Module, pipeline: &str, diags: &Diagnostics) -> Result<(), Error> {
    PIPELINE_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let timing = std::env::var_os("JAXREPL_PASS_TIMING").is_some();
    let key = ctx.to_raw().ptr as usize;
    let cacheable = !timing && !pipeline.contains("transform-interpreter") && !pipeline.contains("convert-math-to-funcs") && process_contexts().lock().unwrap_or_else(|e| e.into_inner()).contains(&key);
    if cacheable {
        let cached = pm_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&(key, pipeline.to_string())).map(|p| p.0);
        let raw = match cached {
            Some(raw) => raw,
            None => {
                let pm = new_pass_manager(ctx, pipeline, false)?;
                let mut cache = pm_cache().lock().unwrap_or_else(|e| e.into_inner());
                if cache.len() >= PM_CACHE_MAX {
                    drop(cache);
                    return run_pm(&pm, module, diags);
                }
                let raw = pm.to_raw();
                // The cache owns it from here (never destroyed: the contexts live as long).
                std::mem::forget(pm);
                cache.insert((key, pipeline.to_string()), CachedPm(raw));
                raw
            }
        };
        // SAFETY: `raw` is a live pass manager of `ctx` (cached above, never destroyed);
        // the caller holds `ctx`'s lock, so no other thread runs it. `ManuallyDrop` keeps
        // the wrapper from destroying it.
        let pm = std::mem::ManuallyDrop::new(unsafe { PassManager::from_raw(raw) });
        return run_pm(&pm, module, diags);
    }
    let pm = new_pass_manager(ctx, pipeline, timing)?;
    run_pm(&pm, module, diags)
}

/// A pass manager of `ctx` for the textual `pipeline`, verifier off; `timing`: with MLIR's
/// timing report (printed to stderr when it is destroyed).
fn new_pass_manager<'c>(ctx: &'c Context, pipeline: &str, timing: bool) -> Result<PassManager<'c>, Error> {
    // SAFETY: a fresh pass manager of `ctx`, handed to the melior wrapper that owns and
    // destroys it.
    let pm = unsafe {
        let raw = mlirPassManagerCreate(ctx.to_raw());
        if timing {
            mlirPassManagerEnableTiming(raw);
        }
        PassManager::from_raw(raw)
    };
    parse_pass_pipeline(pm.as_operation_pass_manager(), pipeline)
        .map_err(|e| Error::compile(format!("bad pass pipeline `{pipeline}`: {e}")))?;
    // The parser verified the input; verifying after every pass cost a tenth of the
    // pipeline time. The result is verified once (`run_pm`).
    pm.enable_verifier(false);
    Ok(pm)
}

/// Runs `pm` on `module` and verifies the result.
fn run_pm(pm: &PassManager, module: &mut Module, diags: &Diagnostics) -> Result<(), Error> {
    pm.run(module).map_err(|_| diags.error("pass pipeline failed"))?;
    if module.as_operation().verify() {
        Ok(())
    } else {
        Err(diags.error("the pass pipeline produced invalid IR"))
    }
}

/// What [`fuse_multiply_adds`] does, for the persistent cache key (a change to it must
/// not load objects compiled without it).
pub const FP_CONTRACTION: &str = "llvm.intr.fmuladd from a single-use llvm.fmul into llvm.fadd/fsub; no contract flags";

/// Fuses each floating-point multiply into the add or subtract that is its only use: in
/// the LLVM-dialect module `m`, `llvm.fadd(llvm.fmul(a, b), c)` becomes
/// `llvm.intr.fmuladd(a, b, c)`, `a*b - c` becomes `fmuladd(a, b, -c)` and `c - a*b`
/// becomes `fmuladd(-a, b, c)` (the multiply taken from the first operand when both
/// qualify), as XLA's CPU backend allows FMA fusion for all code (`llvm::FPOpFusion::Fast`
/// in its target options). On this target `fmuladd` is one fused multiply-add (one
/// rounding instead of two). Run after the lowering to the LLVM dialect, so that the
/// lowered and optimised MLIR texts are unchanged.
///
/// The pairs are chosen here, before any LLVM pass, rather than left to the code
/// generator through `contract` flags (which this function therefore does not set): the
/// code generator fuses only within one basic block and, at LLVM's `None` level
/// (FastISel), not at all, so tier 1 and the optimised tier (whose passes move products
/// out of loops) fused different pairs and a function's first call could differ from its
/// later calls in the last bit. Here both tiers compute the same operations. The rule is
/// the code generator's (`DAGCombiner`: a `contract` multiply with one use), so results
/// are those of the earlier `contract` flags wherever the pair sat in one block. No
/// fast-math flags are left on float adds, subtracts and multiplies (the lowering sets
/// only `contract`, on its own multiply-adds). Measured (bench `loops`, 2 cores): a `while_loop` whose body is
/// `c * 0.999 + 1e-3` runs its serial chain as one `vfmadd` per iteration.
pub fn fuse_multiply_adds(ctx: &melior::Context, m: &Module) {
    unsafe extern "C" fn collect(op: MlirOperation, data: *mut c_void) -> MlirWalkResult {
        // SAFETY: `data` is the `Vec` passed below, alive for the walk; `op` is valid
        // during the callback.
        unsafe {
            let name = mlirIdentifierStr(mlirOperationGetName(op));
            let name = std::slice::from_raw_parts(name.data as *const u8, name.length);
            if matches!(name, b"llvm.fadd" | b"llvm.fsub") {
                (*(data as *mut Vec<MlirOperation>)).push(op);
            }
        }
        MlirWalkResult_MlirWalkResultAdvance
    }
    /// The multiply defining `v` when `v` has no other use.
    unsafe fn single_use_fmul(v: MlirValue) -> Option<MlirOperation> {
        // SAFETY: `v` is a live value of the module (caller).
        unsafe {
            if !mlirValueIsAOpResult(v) {
                return None;
            }
            let def = mlirOpResultGetOwner(v);
            let name = mlirIdentifierStr(mlirOperationGetName(def));
            if std::slice::from_raw_parts(name.data as *const u8, name.length) != b"llvm.fmul" {
                return None;
            }
            let first = mlirValueGetFirstUse(v);
            (!mlirOpOperandIsNull(first) && mlirOpOperandIsNull(mlirOpOperandGetNextUse(first))).then_some(def)
        }
    }
    /// Creates `name(operands) : ty` with fastmath flags `fmf` before `at`.
    unsafe fn create(ctx: mlir_sys::MlirContext, name: &str, operands: &[MlirValue], ty: MlirType, fmf: MlirAttribute, at: MlirOperation) -> MlirValue {
        // SAFETY: live context, values, type and attribute (caller); the state is
        // consumed by `mlirOperationCreate` and the operation handed to the block.
        unsafe {
            let mut st = mlirOperationStateGet(sref(name), mlirOperationGetLocation(at));
            mlirOperationStateAddOperands(&mut st, operands.len() as isize, operands.as_ptr());
            mlirOperationStateAddResults(&mut st, 1, &ty);
            let attr = mlirNamedAttributeGet(mlirIdentifierGet(ctx, sref("fastmathFlags")), fmf);
            mlirOperationStateAddAttributes(&mut st, 1, &attr);
            let op = mlirOperationCreate(&mut st);
            mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(at), at, op);
            mlirOperationGetResult(op, 0)
        }
    }
    // SAFETY: `ctx` and `m` are valid and used under the context lock (module docs). Every
    // rewritten add is replaced and destroyed once (the walk collected each op once, and
    // no collected op is a multiply), and a multiply is destroyed only after its one use.
    unsafe {
        let c = ctx.to_raw();
        let none = mlirAttributeParseGet(c, sref("#llvm.fastmath<none>"));
        if none.ptr.is_null() {
            return;
        }
        let mut adds: Vec<MlirOperation> = Vec::new();
        mlirOperationWalk(m.as_operation().to_raw(), Some(collect), &mut adds as *mut Vec<MlirOperation> as *mut c_void, MlirWalkOrder_MlirWalkPostOrder);
        for op in adds {
            let name = mlirIdentifierStr(mlirOperationGetName(op));
            let sub = std::slice::from_raw_parts(name.data as *const u8, name.length) == b"llvm.fsub";
            let (x, y) = (mlirOperationGetOperand(op, 0), mlirOperationGetOperand(op, 1));
            let (mul, other, mul_first) = match (single_use_fmul(x), single_use_fmul(y)) {
                (Some(mm), _) => (mm, y, true),
                (None, Some(mm)) => (mm, x, false),
                (None, None) => continue,
            };
            let res = mlirOperationGetResult(op, 0);
            let ty = mlirValueGetType(res);
            let (mut a, b) = (mlirOperationGetOperand(mul, 0), mlirOperationGetOperand(mul, 1));
            let mut addend = other;
            if sub && mul_first {
                addend = create(c, "llvm.fneg", &[other], ty, none, op);
            } else if sub {
                a = create(c, "llvm.fneg", &[a], ty, none, op);
            }
            let fused = create(c, "llvm.intr.fmuladd", &[a, b, addend], ty, none, op);
            mlirValueReplaceAllUsesOfWith(res, fused);
            mlirOperationDestroy(op);
            mlirOperationDestroy(mul);
        }
        // The lowering marks its own multiply-adds (polynomial steps, dot products)
        // `contract`; left on the operations not fused here, they would let the code
        // generator fuse pairs the optimiser forms later, in one tier only.
        unsafe extern "C" fn clear(op: MlirOperation, data: *mut c_void) -> MlirWalkResult {
            // SAFETY: `data` is the `none` attribute passed below; `op` is valid during the
            // callback.
            unsafe {
                let name = mlirIdentifierStr(mlirOperationGetName(op));
                let name = std::slice::from_raw_parts(name.data as *const u8, name.length);
                if matches!(name, b"llvm.fadd" | b"llvm.fsub" | b"llvm.fmul") && !mlirOperationGetAttributeByName(op, sref("fastmathFlags")).ptr.is_null() {
                    mlirOperationSetAttributeByName(op, sref("fastmathFlags"), *(data as *const MlirAttribute));
                }
            }
            MlirWalkResult_MlirWalkResultAdvance
        }
        let mut none_attr = none;
        mlirOperationWalk(m.as_operation().to_raw(), Some(clear), &mut none_attr as *mut MlirAttribute as *mut c_void, MlirWalkOrder_MlirWalkPostOrder);
    }
}

fn sref(s: &str) -> MlirStringRef {
    MlirStringRef { data: s.as_ptr() as *const _, length: s.len() }
}

/// An owned `mlirExecutionEngine` (the C API's; melior's wrapper does not check for null
/// and passes non-NUL-terminated library paths).
pub struct Engine {
    raw: MlirExecutionEngine,
}

impl Engine {
    /// Translates an LLVM-dialect module to LLVM IR, optimizes it at `opt_level` and sets up
    /// the JIT. `libs` are shared libraries to load. `keep_object`: compile position-
    /// independent code and keep the object file (`dump_object`), for the persistent
    /// compilation cache. Errors if the C API returns null.
    pub fn create(module: &Module, opt_level: u8, libs: &[&str], keep_object: bool) -> Result<Engine, String> {
        // The C API reads each path's StringRef data as a C string: keep them NUL-terminated.
        let cs: Vec<CString> = libs.iter().map(|s| CString::new(*s).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
        let refs: Vec<MlirStringRef> = cs.iter().map(|c| MlirStringRef { data: c.as_ptr(), length: c.as_bytes().len() }).collect();
        // SAFETY: module is a valid LLVM-dialect module; refs outlive the call.
        let raw = unsafe { mlirExecutionEngineCreate(module.to_raw(), opt_level.min(3) as i32, refs.len() as i32, refs.as_ptr(), keep_object, keep_object) };
        if raw.ptr.is_null() {
            return Err("mlirExecutionEngineCreate returned null (translation to LLVM IR failed)".into());
        }
        Ok(Engine { raw })
    }
    /// Makes `ptr` resolvable as `name` from JIT'd code (before `initialize`).
    ///
    /// # Safety
    /// `ptr` must be a function (or data) with the signature the compiled code declares for
    /// `name`, valid for the engine's lifetime.
    pub unsafe fn register_symbol(&self, name: &str, ptr: *mut c_void) {
        // SAFETY: valid engine; the C API copies the name.
        unsafe { mlirExecutionEngineRegisterSymbol(self.raw, sref(name), ptr) }
    }
    pub fn initialize(&self) {
        // SAFETY: valid engine.
        unsafe { mlirExecutionEngineInitialize(self.raw) }
    }
    /// Writes the object file the JIT compiled to `path` (only for an engine created with
    /// `keep_object`, after `lookup_packed`; otherwise MLIR prints a note and writes
    /// nothing).
    pub fn dump_object(&self, path: &str) {
        // SAFETY: valid engine; the path is NUL-terminated for the C++ side's StringRef.
        let c = CString::new(path).unwrap_or_default();
        unsafe { mlirExecutionEngineDumpToObjectFile(self.raw, MlirStringRef { data: c.as_ptr(), length: c.as_bytes().len() }) }
    }
    /// The packed wrapper (`void(void**)`) of function `name`, or null.
    pub fn lookup_packed(&self, name: &str) -> *mut c_void {
        // SAFETY: valid engine; the name is copied.
        unsafe { mlirExecutionEngineLookupPacked(self.raw, sref(name)) }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: created by mlirExecutionEngineCreate, destroyed once.
        unsafe { mlirExecutionEngineDestroy(self.raw) }
    }
}

/// LLVM IR text of an LLVM-dialect module (`mlirTranslateModuleToLLVMIR`).
pub fn translate_to_llvm_ir(module: &Module, diags: &Diagnostics) -> Result<String, Error> {
    // SAFETY: the LLVM context and module are created, printed and disposed here.
    unsafe {
        let llctx = LLVMContextCreate();
        let m = mlirTranslateModuleToLLVMIR(mlirModuleGetOperation(module.to_raw()), llctx);
        if m.is_null() {
            LLVMContextDispose(llctx);
            return Err(diags.error("translation to LLVM IR failed"));
        }
        let s = LLVMPrintModuleToString(m);
        let out = CStr::from_ptr(s).to_string_lossy().into_owned();
        LLVMDisposeMessage(s);
        LLVMDisposeModule(m);
        LLVMContextDispose(llctx);
        Ok(out)
    }
}
