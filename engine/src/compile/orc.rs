//! Native code through ORC without MLIR's ExecutionEngine: the persistent compilation
//! cache's hit path (`load_object`) and the process-wide JIT every compile links into
//! (`SharedJit`, `compile_object`).
//!
//! An entry of the cache holds the relocatable object the shared JIT linked (see
//! `persistent`; older entries hold the ExecutionEngine's). Here it is linked into a fresh ORC `LLJIT` (LLVM-C's `LLJIT.h`/`Orc.h`,
//! exported by the shared libLLVM the engine already links): the runtime symbols compiled
//! code calls (host callbacks, `memrefCopy`, the GEMM runtime) are defined as absolute
//! symbols from the same tables the ExecutionEngine path registers, everything else
//! (libm, libc) resolves in the process, and libomp is searched by path for modules of
//! the parallel pipeline. Linking an object runs no pass pipeline and no code generator.
//!
//! The shared JIT: an ExecutionEngine builds a target machine, an LLJIT, its linking layer
//! and a code generator pass manager for every executable, a fixed cost that was most of
//! a small module's compile at tier 1 (ARCHITECTURE, `JAXREPL_COMPILE_TIMES`), and
//! registered every object with the perf and GDB JIT listeners (perf's wrote a jitdump
//! file per process under `/tmp/.debug/jit`). Modules instead are translated to LLVM IR,
//! given the packed entry the ExecutionEngine would generate (`void f(void **args)`,
//! MLIR's `packFunctionArguments` convention), optimised by LLVM's `default<On>` pipeline
//! (levels above 0), emitted as an object by one process-wide target machine per level
//! (host triple, CPU and features, position-independent) and linked into one
//! process-wide LLJIT under a resource tracker per executable; dropping the executable
//! removes its code. Each module's definitions are made internal and its entry gets a
//! unique name, so modules never clash in the one JITDylib.
//!
//! Invariant: a `LoadedCode` owns its JIT; the entry pointer it returns is valid until the
//! `LoadedCode` is dropped. Every failure is an `Err(String)` (the caller ignores the entry
//! and recompiles), never a crash.

use mlir_sys::LLVMModuleRef;
use std::ffi::{c_char, c_void, CStr, CString};

type Raw = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct SymbolFlags {
    generic: u8,
    target: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct EvaluatedSymbol {
    address: u64,
    flags: SymbolFlags,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SymbolMapPair {
    name: Raw,
    sym: EvaluatedSymbol,
}

/// `LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable`.
const EXPORTED_CALLABLE: u8 = 1 | 4;

type Filter = Option<unsafe extern "C" fn(ctx: *mut c_void, sym: Raw) -> i32>;

// LLVM-C: llvm-c/LLJIT.h, Orc.h, Core.h, Error.h.
unsafe extern "C" {
    fn LLVMOrcCreateLLJITBuilder() -> Raw;
    fn LLVMOrcCreateLLJIT(result: *mut Raw, builder: Raw) -> Raw;
    fn LLVMOrcDisposeLLJIT(j: Raw) -> Raw;
    fn LLVMOrcLLJITGetMainJITDylib(j: Raw) -> Raw;
    fn LLVMOrcLLJITGetGlobalPrefix(j: Raw) -> c_char;
    fn LLVMOrcLLJITMangleAndIntern(j: Raw, name: *const c_char) -> Raw;
    fn LLVMOrcLLJITAddObjectFile(j: Raw, jd: Raw, buf: Raw) -> Raw;
    fn LLVMOrcLLJITLookup(j: Raw, result: *mut u64, name: *const c_char) -> Raw;
    fn LLVMOrcAbsoluteSymbols(syms: *mut SymbolMapPair, n: usize) -> Raw;
    fn LLVMOrcJITDylibDefine(jd: Raw, mu: Raw) -> Raw;
    fn LLVMOrcDisposeMaterializationUnit(mu: Raw);
    fn LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(result: *mut Raw, prefix: c_char, filter: Filter, ctx: *mut c_void) -> Raw;
    fn LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(result: *mut Raw, path: *const c_char, prefix: c_char, filter: Filter, ctx: *mut c_void) -> Raw;
    fn LLVMOrcJITDylibAddGenerator(jd: Raw, generator: Raw);
    fn LLVMCreateMemoryBufferWithMemoryRangeCopy(data: *const c_char, len: usize, name: *const c_char) -> Raw;
    fn LLVMGetErrorMessage(e: Raw) -> *mut c_char;
    fn LLVMDisposeErrorMessage(m: *mut c_char);
    fn LLVMOrcLLJITAddObjectFileWithRT(j: Raw, rt: Raw, buf: Raw) -> Raw;
    fn LLVMOrcJITDylibCreateResourceTracker(jd: Raw) -> Raw;
    fn LLVMOrcResourceTrackerRemove(rt: Raw) -> Raw;
    fn LLVMOrcReleaseResourceTracker(rt: Raw);
    // Target machines (llvm-c/TargetMachine.h).
    fn LLVMGetDefaultTargetTriple() -> *mut c_char;
    fn LLVMGetHostCPUName() -> *mut c_char;
    fn LLVMGetHostCPUFeatures() -> *mut c_char;
    fn LLVMDisposeMessage(m: *mut c_char);
    fn LLVMGetTargetFromTriple(triple: *const c_char, t: *mut Raw, err: *mut *mut c_char) -> i32;
    fn LLVMCreateTargetMachine(t: Raw, triple: *const c_char, cpu: *const c_char, features: *const c_char, level: u32, reloc: u32, model: u32) -> Raw;
    fn LLVMCreateTargetDataLayout(tm: Raw) -> Raw;
    fn LLVMDisposeTargetData(td: Raw);
    fn LLVMSetModuleDataLayout(m: LLVMModuleRef, dl: Raw);
    fn LLVMSetTarget(m: LLVMModuleRef, triple: *const c_char);
    fn LLVMTargetMachineEmitToMemoryBuffer(tm: Raw, m: LLVMModuleRef, kind: u32, err: *mut *mut c_char, out: *mut Raw) -> i32;
    // Building the packed entry (llvm-c/Core.h).
    fn LLVMGetNamedFunction(m: Raw, name: *const c_char) -> Raw;
    fn LLVMGlobalGetValueType(g: Raw) -> Raw;
    fn LLVMCountParamTypes(fty: Raw) -> u32;
    fn LLVMGetParamTypes(fty: Raw, dest: *mut Raw);
    fn LLVMGetReturnType(fty: Raw) -> Raw;
    fn LLVMGetTypeKind(t: Raw) -> u32;
    fn LLVMPointerTypeInContext(c: Raw, address_space: u32) -> Raw;
    fn LLVMVoidTypeInContext(c: Raw) -> Raw;
    fn LLVMInt64TypeInContext(c: Raw) -> Raw;
    fn LLVMConstInt(t: Raw, n: u64, sign_extend: i32) -> Raw;
    fn LLVMFunctionType(ret: Raw, params: *mut Raw, n: u32, var_arg: i32) -> Raw;
    fn LLVMAddFunction(m: Raw, name: *const c_char, fty: Raw) -> Raw;
    fn LLVMAppendBasicBlockInContext(c: Raw, f: Raw, name: *const c_char) -> Raw;
    fn LLVMCreateBuilderInContext(c: Raw) -> Raw;
    fn LLVMPositionBuilderAtEnd(b: Raw, bb: Raw);
    fn LLVMDisposeBuilder(b: Raw);
    fn LLVMGetParam(f: Raw, i: u32) -> Raw;
    fn LLVMBuildGEP2(b: Raw, t: Raw, p: Raw, idx: *mut Raw, n: u32, name: *const c_char) -> Raw;
    fn LLVMBuildLoad2(b: Raw, t: Raw, p: Raw, name: *const c_char) -> Raw;
    fn LLVMBuildCall2(b: Raw, fty: Raw, f: Raw, args: *mut Raw, n: u32, name: *const c_char) -> Raw;
    fn LLVMBuildRetVoid(b: Raw) -> Raw;
    fn LLVMGetFirstFunction(m: Raw) -> Raw;
    fn LLVMGetNextFunction(f: Raw) -> Raw;
    fn LLVMGetFirstGlobal(m: Raw) -> Raw;
    fn LLVMGetNextGlobal(g: Raw) -> Raw;
    fn LLVMIsDeclaration(g: Raw) -> i32;
    fn LLVMSetLinkage(g: Raw, linkage: u32);
    fn LLVMGetLinkage(g: Raw) -> u32;
    fn LLVMGetComdat(g: Raw) -> Raw;
    fn LLVMSetComdat(g: Raw, c: Raw);
    fn LLVMGetAttributeCountAtIndex(f: Raw, idx: u32) -> u32;
    fn LLVMGetAttributesAtIndex(f: Raw, idx: u32, attrs: *mut Raw);
    fn LLVMAddAttributeAtIndex(f: Raw, idx: u32, a: Raw);
    fn LLVMGetEnumAttributeKindForName(name: *const c_char, len: usize) -> u32;
    fn LLVMGetFirstBasicBlock(f: Raw) -> Raw;
    fn LLVMGetNextBasicBlock(bb: Raw) -> Raw;
    fn LLVMGetFirstInstruction(bb: Raw) -> Raw;
    fn LLVMGetNextInstruction(i: Raw) -> Raw;
    fn LLVMIsACallInst(v: Raw) -> Raw;
    fn LLVMGetCalledValue(call: Raw) -> Raw;
    fn LLVMGetValueName2(v: Raw, len: *mut usize) -> *const c_char;
    fn LLVMGetOperand(v: Raw, i: u32) -> Raw;
    fn LLVMTypeOf(v: Raw) -> Raw;
    fn LLVMPositionBuilderBefore(b: Raw, i: Raw);
    fn LLVMReplaceAllUsesWith(old: Raw, new: Raw);
    fn LLVMInstructionEraseFromParent(i: Raw);
    fn LLVMAddCallSiteAttribute(call: Raw, idx: u32, a: Raw);
    fn LLVMGetNamedFunctionWithLength(m: Raw, name: *const c_char, len: usize) -> Raw;
    fn LLVMCreateEnumAttribute(c: Raw, kind: u32, val: u64) -> Raw;
    fn LLVMDisposeModule(m: Raw);
    fn LLVMContextCreate() -> Raw;
    fn LLVMContextDispose(c: Raw);
    fn LLVMDisposeTargetMachine(tm: Raw);
    fn LLVMGetBufferStart(b: Raw) -> *const c_char;
    fn LLVMGetBufferSize(b: Raw) -> usize;
    // The new pass manager (llvm-c/Transforms/PassBuilder.h).
    fn LLVMCreatePassBuilderOptions() -> Raw;
    fn LLVMDisposePassBuilderOptions(o: Raw);
    fn LLVMPassBuilderOptionsSetLoopUnrolling(o: Raw, on: i32);
    fn LLVMPassBuilderOptionsSetLoopInterleaving(o: Raw, on: i32);
    fn LLVMPassBuilderOptionsSetLoopVectorization(o: Raw, on: i32);
    fn LLVMPassBuilderOptionsSetSLPVectorization(o: Raw, on: i32);
    fn LLVMRunPasses(m: LLVMModuleRef, passes: *const c_char, tm: Raw, o: Raw) -> Raw;
}

/// Takes an `LLVMErrorRef`: `Ok` for success, else its message (the error is consumed).
fn check(e: Raw, what: &str) -> Result<(), String> {
    if e.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null LLVMErrorRef is consumed by LLVMGetErrorMessage; the message is
    // copied and disposed once.
    unsafe {
        let m = LLVMGetErrorMessage(e);
        let s = CStr::from_ptr(m).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(m);
        Err(format!("{what}: {s}"))
    }
}

/// Makes the process's symbols (libm, libc) and the engine's runtime `symbols` (absolute
/// addresses) resolvable from code linked into `jd` of `jit`.
///
/// # Safety
/// `jit` is a live LLJIT and `jd` one of its JITDylibs; each symbol is a function of the
/// signature compiled code declares for its name, valid for the process.
unsafe fn define_symbols(jit: Raw, jd: Raw, symbols: &[(String, *mut c_void)]) -> Result<(), String> {
    // SAFETY: LLVM-C calls in their documented order; the generator and materialization
    // unit are owned by the JITDylib once added (disposed here when defining fails).
    unsafe {
        let mut pgen: Raw = std::ptr::null_mut();
        check(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&mut pgen, LLVMOrcLLJITGetGlobalPrefix(jit), None, std::ptr::null_mut()), "process symbols")?;
        LLVMOrcJITDylibAddGenerator(jd, pgen);
        let mut pairs: Vec<SymbolMapPair> = Vec::with_capacity(symbols.len());
        for (name, ptr) in symbols {
            let n = CString::new(name.as_str()).map_err(|e| e.to_string())?;
            pairs.push(SymbolMapPair {
                name: LLVMOrcLLJITMangleAndIntern(jit, n.as_ptr()),
                sym: EvaluatedSymbol { address: *ptr as u64, flags: SymbolFlags { generic: EXPORTED_CALLABLE, target: 0 } },
            });
        }
        let mu = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
        if let Err(e) = check(LLVMOrcJITDylibDefine(jd, mu), "runtime symbols") {
            LLVMOrcDisposeMaterializationUnit(mu);
            return Err(e);
        }
        Ok(())
    }
}

/// Native code linked from an object file; owns its JIT.
pub(crate) struct LoadedCode {
    jit: Raw,
}

// SAFETY: the JIT is only used while loading (on one thread) and destroyed by Drop, which
// Rust orders after every call of the code it holds (see `Executable`).
unsafe impl Send for LoadedCode {}
unsafe impl Sync for LoadedCode {}

impl Drop for LoadedCode {
    fn drop(&mut self) {
        // SAFETY: created by LLVMOrcCreateLLJIT, disposed once; a failure to tear down
        // only leaks.
        let _ = check(unsafe { LLVMOrcDisposeLLJIT(self.jit) }, "dispose");
    }
}

/// Links `object` (an ELF relocatable object for this host) into a new JIT with the
/// engine's runtime `symbols` and returns the code and the address of `entry` (an
/// unmangled symbol name). `libomp`: also search the OpenMP runtime at that path.
/// Errors: the object does not link (unresolved symbols, bad format) or `entry` is absent.
pub(crate) fn load_object(object: &[u8], symbols: &[(String, *mut c_void)], libomp: Option<&str>, entry: &str) -> Result<(LoadedCode, *mut c_void), String> {
    super::inspect::init_native_target().map_err(|e| e.message)?;
    let entry_c = CString::new(entry).map_err(|e| e.to_string())?;
    // SAFETY: LLVM-C calls in their documented order; every created object is owned by
    // the JIT (builder, generators, materialization unit, memory buffer) or disposed here.
    unsafe {
        let mut jit: Raw = std::ptr::null_mut();
        check(LLVMOrcCreateLLJIT(&mut jit, LLVMOrcCreateLLJITBuilder()), "cannot create an ORC JIT")?;
        let code = LoadedCode { jit };
        let jd = LLVMOrcLLJITGetMainJITDylib(jit);
        let prefix = LLVMOrcLLJITGetGlobalPrefix(jit);
        define_symbols(jit, jd, symbols)?;
        if let Some(path) = libomp {
            let p = CString::new(path).map_err(|e| e.to_string())?;
            let mut g: Raw = std::ptr::null_mut();
            check(LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&mut g, p.as_ptr(), prefix, None, std::ptr::null_mut()), "libomp")?;
            LLVMOrcJITDylibAddGenerator(jd, g);
        }
        let name = CString::new("jaxrepl-cached-object").expect("no NUL");
        let buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(object.as_ptr() as *const c_char, object.len(), name.as_ptr());
        check(LLVMOrcLLJITAddObjectFile(jit, jd, buf), "cannot add the object")?;
        let mut addr = 0u64;
        check(LLVMOrcLLJITLookup(jit, &mut addr, entry_c.as_ptr()), "cannot link the object")?;
        if addr == 0 {
            return Err(format!("`{entry}` resolved to address 0"));
        }
        Ok((code, addr as *mut c_void))
    }
}

/// Takes an LLVM-allocated message (`LLVMDisposeMessage`).
unsafe fn take_message(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is a NUL-terminated message LLVM allocated; freed once here.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        LLVMDisposeMessage(p);
        s
    }
}

/// The process-wide LLJIT and the target machines that emit its objects.
struct SharedJit {
    jit: Raw,
    jd: Raw,
    /// The host's LLVM target, triple, CPU name and features.
    target: Raw,
    triple: CString,
    cpu: CString,
    features: CString,
    /// One target machine per LLVM optimisation level 0-3 (code generation at
    /// `codegen_level`) for foreground compiles (`[0]`, run under the process MLIR
    /// context's lock) and one per level for the tier-2 worker's (`[1]`), created on first
    /// use: a foreground compile never waits for a background one. Emission through one
    /// machine is not reentrant, hence the mutex.
    tms: [[std::sync::OnceLock<std::sync::Mutex<usize>>; 4]; 2],
    /// Whether libomp's search generator has been added to the JITDylib.
    libomp: std::sync::Mutex<bool>,
}

// SAFETY: ORC's LLJIT, JITDylib and resource trackers are thread-safe (the execution
// session locks); a target machine is only used under its mutex.
unsafe impl Send for SharedJit {}
unsafe impl Sync for SharedJit {}

static SHARED: std::sync::OnceLock<Result<SharedJit, String>> = std::sync::OnceLock::new();

/// The shared JIT, created on first use with the runtime symbols (`super::runtime_symbols`,
/// the same for every module) and the process's own symbols.
fn shared() -> Result<&'static SharedJit, String> {
    SHARED.get_or_init(create_shared).as_ref().map_err(Clone::clone)
}

/// Whether the shared JIT could be created (else every compile falls back to an
/// ExecutionEngine of its own).
pub(crate) fn available() -> bool {
    shared().is_ok()
}

/// Creates the shared JIT and its O0 target machine on a background thread (called when
/// the process's MLIR context is created), so that the first compile finds them ready or
/// nearly so.
pub(crate) fn warm_up() {
    if !super::shared_jit_enabled() {
        return;
    }
    let _ = std::thread::Builder::new().name("jaxrepl-jit-init".into()).spawn(|| {
        if let Ok(j) = shared() {
            let _ = j.tm(0, false);
        }
    });
}

fn create_shared() -> Result<SharedJit, String> {
    super::inspect::init_native_target().map_err(|e| e.message)?;
    // SAFETY: LLVM-C calls in their documented order; the JIT lives for the process, the
    // host strings are copied and disposed here.
    unsafe {
        let triple = LLVMGetDefaultTargetTriple();
        let cpu = LLVMGetHostCPUName();
        let features = LLVMGetHostCPUFeatures();
        let mut target: Raw = std::ptr::null_mut();
        let mut err: *mut c_char = std::ptr::null_mut();
        let found = LLVMGetTargetFromTriple(triple, &mut target, &mut err) == 0;
        let triple = CString::new(take_message(triple)).map_err(|e| e.to_string())?;
        let cpu = CString::new(take_message(cpu)).map_err(|e| e.to_string())?;
        let features = CString::new(take_message(features)).map_err(|e| e.to_string())?;
        if !found {
            return Err(format!("no LLVM target for the host: {}", take_message(err)));
        }
        let mut jit: Raw = std::ptr::null_mut();
        check(LLVMOrcCreateLLJIT(&mut jit, LLVMOrcCreateLLJITBuilder()), "cannot create an ORC JIT")?;
        let jd = LLVMOrcLLJITGetMainJITDylib(jit);
        define_symbols(jit, jd, &super::runtime_symbols())?;
        Ok(SharedJit { jit, jd, target, triple, cpu, features, tms: Default::default(), libomp: std::sync::Mutex::new(false) })
    }
}

impl SharedJit {
    /// The target machine of LLVM optimisation level `level` (0-3) for foreground or
    /// `background` compiles, created on first use.
    fn tm(&self, level: u8, background: bool) -> Result<&std::sync::Mutex<usize>, String> {
        let cell = &self.tms[background as usize][level.min(3) as usize];
        if let Some(m) = cell.get() {
            return Ok(m);
        }
        // LLVMRelocPIC = 2, LLVMCodeModelSmall = 3: JITLink
        // builds the GOT and stubs of a position-independent object wherever it maps it.
        // SAFETY: valid target and NUL-terminated host strings; the machine lives for the
        // process (a racing creation is disposed).
        let cg = codegen_level(level);
        let tm = unsafe { LLVMCreateTargetMachine(self.target, self.triple.as_ptr(), self.cpu.as_ptr(), self.features.as_ptr(), cg, 2, 3) };
        if tm.is_null() {
            return Err("cannot create the host's target machine".into());
        }
        if cell.set(std::sync::Mutex::new(tm as usize)).is_err() {
            // SAFETY: created above and never shared.
            unsafe { LLVMDisposeTargetMachine(tm) };
        }
        Ok(cell.get().expect("set above"))
    }
}

/// Sets the pipeline tuning MLIR's ExecutionEngine uses (`makeOptimizingTransformer`):
/// loop unrolling, interleaving and vectorisation, SLP vectorisation (LLVM-C's defaults
/// leave SLP off) on new-pass-manager options `opts`.
///
/// # Safety
/// `opts` is a live `LLVMPassBuilderOptionsRef`.
pub(super) unsafe fn set_tuning(opts: Raw) {
    // SAFETY: valid options (caller).
    unsafe {
        LLVMPassBuilderOptionsSetLoopUnrolling(opts, 1);
        LLVMPassBuilderOptionsSetLoopInterleaving(opts, 1);
        LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
        LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
    }
}

/// The code generator's level (`LLVMCodeGenOptLevel`) for LLVM optimisation level
/// `level`: the same (0 = `None`, FastISel, for tier 1). Fused multiply-adds do not depend
/// on it: they are formed in the IR before any LLVM pass (`context::fuse_multiply_adds`),
/// so FastISel's code computes the same operations as the optimised tier's. (With
/// `contract` flags left to the code generator, `None` fused nothing and tier 1 had to
/// generate code at `Less`, which cost the MLP grad's tier-1 emission 25-40 ms against
/// 10-17 ms at `None` on a loaded host.)
pub(super) fn codegen_level(level: u8) -> u32 {
    level.min(3) as u32
}

/// Native code of one module in the shared JIT: removed from it on drop.
pub(crate) struct JitCode {
    rt: Raw,
}

/// Live `JitCode`s: executables whose code is in the shared JIT.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many executables have code in the shared JIT now (each removes its code when
/// dropped); for tests and leak checks.
pub fn live_code_count() -> usize {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

// SAFETY: a resource tracker is a thread-safe handle into the execution session; it is
// removed once, by Drop, which Rust orders after every call of the code.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        // SAFETY: created by LLVMOrcJITDylibCreateResourceTracker, removed and released
        // once; a failure to remove only leaks the code.
        unsafe {
            let _ = check(LLVMOrcResourceTrackerRemove(self.rt), "remove");
            LLVMOrcReleaseResourceTracker(self.rt);
        }
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Distinguishes the entries of modules in the shared JIT.
static NEXT_ENTRY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What `compile_object` produced.
pub(crate) struct Compiled {
    pub code: JitCode,
    /// The packed entry (`void(void**)`), valid while `code` lives.
    pub entry: *mut c_void,
    /// Seconds translating to LLVM IR, optimising and emitting the object.
    pub emit_secs: f64,
    /// Seconds linking the object into the JIT.
    pub link_secs: f64,
    /// With `keep_object`: the object and the name of its packed entry.
    pub object: Option<(Vec<u8>, String)>,
}

/// Compiles the LLVM-dialect `module` at LLVM optimisation level `opt_level` into the
/// shared JIT: the packed entry of function `entry` (which takes only pointers and returns
/// nothing: the `_mlir_ciface_` wrapper of the module's entry). Levels above 0 run LLVM's
/// `default<On>` pipeline with the tuning the ExecutionEngine uses (loop unrolling,
/// interleaving and vectorisation, SLP vectorisation; MLIR's
/// `makeOptimizingTransformer`). `libomp`: the module calls the OpenMP runtime at that
/// path. `keep_object`: also return a copy of the object (position-independent, for the
/// persistent compilation cache). `background`: a tier-2 worker's compile (its own target
/// machines). The caller holds the lock of the MLIR context `module` lives in. Errors:
/// translation, optimisation, emission or link fails, or `entry` is absent or not of that
/// form.
pub(crate) fn compile_object(module: &melior::ir::Module, opt_level: u8, entry: &str, libomp: Option<&str>, keep_object: bool, background: bool) -> Result<Compiled, String> {
    let j = shared()?;
    let t0 = std::time::Instant::now();
    if let Some(path) = libomp {
        let mut added = j.libomp.lock().unwrap_or_else(|e| e.into_inner());
        if !*added {
            let p = CString::new(path).map_err(|e| e.to_string())?;
            let mut g: Raw = std::ptr::null_mut();
            // SAFETY: the generator is owned by the JITDylib once added.
            unsafe {
                check(LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&mut g, p.as_ptr(), LLVMOrcLLJITGetGlobalPrefix(j.jit), None, std::ptr::null_mut()), "libomp")?;
                LLVMOrcJITDylibAddGenerator(j.jd, g);
            }
            *added = true;
        }
    }
    let packed = format!("jaxrepl_packed_{}", NEXT_ENTRY.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let packed_c = CString::new(packed.as_str()).expect("no NUL");
    let entry_c = CString::new(entry).map_err(|e| e.to_string())?;
    let tm = j.tm(opt_level, background)?;
    // SAFETY: the LLVM context and module are created and disposed here; the MLIR module is
    // valid under the caller's context lock; the object buffer is handed to the JIT.
    let buf = unsafe {
        let llctx = LLVMContextCreate();
        let m = mlir_sys::mlirTranslateModuleToLLVMIR(mlir_sys::mlirModuleGetOperation(module.to_raw()), llctx as mlir_sys::LLVMContextRef) as Raw;
        if m.is_null() {
            LLVMContextDispose(llctx);
            return Err("translation to LLVM IR failed".into());
        }
        let r = emit_object(j, tm, opt_level, llctx, m, &entry_c, &packed_c);
        LLVMDisposeModule(m);
        LLVMContextDispose(llctx);
        r?
    };
    // SAFETY: `buf` is a live memory buffer until handed to the JIT below.
    let object = keep_object.then(|| unsafe { std::slice::from_raw_parts(LLVMGetBufferStart(buf) as *const u8, LLVMGetBufferSize(buf)).to_vec() });
    let emit_secs = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    // SAFETY: the tracker is released by JitCode (on failure too, through its Drop); the
    // buffer is consumed by LLVMOrcLLJITAddObjectFileWithRT.
    unsafe {
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let code = JitCode { rt: LLVMOrcJITDylibCreateResourceTracker(j.jd) };
        check(LLVMOrcLLJITAddObjectFileWithRT(j.jit, code.rt, buf), "cannot add the object")?;
        let mut addr = 0u64;
        check(LLVMOrcLLJITLookup(j.jit, &mut addr, packed_c.as_ptr()), "cannot link the object")?;
        if addr == 0 {
            return Err(format!("`{packed}` resolved to address 0"));
        }
        Ok(Compiled { code, entry: addr as *mut c_void, emit_secs, link_secs: t1.elapsed().as_secs_f64(), object: object.map(|o| (o, packed)) })
    }
}

/// Sets `m`'s triple and data layout to the target machine's, prepares it
/// (`prepare_module`), optimises at `level` and emits the object (a memory buffer the
/// caller owns).
///
/// # Safety
/// `m` is a valid LLVM module in context `llctx`.
unsafe fn emit_object(j: &SharedJit, tm: &std::sync::Mutex<usize>, level: u8, llctx: Raw, m: Raw, entry: &CStr, packed: &CStr) -> Result<Raw, String> {
    let tm = tm.lock().unwrap_or_else(|e| e.into_inner());
    let tm = *tm as Raw;
    // SAFETY: LLVM-C on a valid module; the builder, options and data layout are disposed
    // here.
    unsafe {
        LLVMSetTarget(m as LLVMModuleRef, j.triple.as_ptr());
        let dl = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(m as LLVMModuleRef, dl);
        LLVMDisposeTargetData(dl);
        prepare_module(llctx, m, entry, packed)?;
        if level > 0 {
            let opts = LLVMCreatePassBuilderOptions();
            set_tuning(opts);
            let pipeline = CString::new(format!("default<O{}>", level.min(3))).expect("no NUL");
            let e = LLVMRunPasses(m as LLVMModuleRef, pipeline.as_ptr(), tm, opts);
            LLVMDisposePassBuilderOptions(opts);
            check(e, &format!("LLVM's default<O{}> pipeline", level.min(3)))?;
        }
        let mut buf: Raw = std::ptr::null_mut();
        let mut err: *mut c_char = std::ptr::null_mut();
        // LLVMObjectFile = 1.
        if LLVMTargetMachineEmitToMemoryBuffer(tm, m as LLVMModuleRef, 1, &mut err, &mut buf) != 0 {
            return Err(format!("code emission failed: {}", take_message(err)));
        }
        Ok(buf)
    }
}

/// Adds the packed wrapper `packed` (`void(void**)`, MLIR's `packFunctionArguments`
/// convention) of function `entry` to `m`, with `entry`'s function attributes (the
/// optimiser inlines the entry into it, and `prefer-vector-width` must survive that), and
/// makes every other global definition internal: modules never clash in the shared
/// JITDylib. That includes weak and `linkonce_odr` definitions (MLIR's
/// `convert-math-to-funcs` emits `@__mlir_math_ipowi_i32` so): ORC would keep the first
/// module's copy and link later modules to it, which dropping the first module unmaps.
///
/// # Safety
/// `m` is a valid LLVM module in context `llctx`.
/// Declares the allocation functions compiled code calls for `memref.alloc`
/// (`_mlir_memref_to_llvm_alloc`, `_mlir_memref_to_llvm_aligned_alloc`, served by
/// `compile::alloc`) as returning `noalias` pointers, as `malloc` is: each returns memory
/// no other live pointer reaches. Without it LLVM's alias analysis could not tell a
/// temporary buffer (a reduction's accumulators) from the arguments, versioned loops with
/// run-time overlap checks and kept accumulators in memory.
///
/// # Safety
/// `llctx` is the context of the valid module `m`.
unsafe fn mark_allocators(llctx: Raw, m: Raw) {
    // SAFETY: LLVM-C on a valid module and its context (caller).
    unsafe {
        let kind = LLVMGetEnumAttributeKindForName(c"noalias".as_ptr(), 7);
        if kind == 0 {
            return;
        }
        for name in [c"_mlir_memref_to_llvm_alloc", c"_mlir_memref_to_llvm_aligned_alloc"] {
            let f = LLVMGetNamedFunction(m, name.as_ptr());
            if !f.is_null() {
                LLVMAddAttributeAtIndex(f, ATTRIBUTE_RETURN_INDEX, LLVMCreateEnumAttribute(llctx, kind, 0));
            }
        }
    }
}

/// Replaces every scalar `llvm.pow.f32`/`llvm.pow.f64` call (from `math.powf`) by a
/// `nobuiltin` call to libm's `powf`/`pow`, the function unoptimised code calls for it too.
/// LLVM's optimiser rewrites `pow` with some constant arguments (`pow(x, 0.5)` to `sqrt`,
/// `pow(x, 2)` to `x*x`, `pow(x, -1)` to `1/x`, `pow(2, y)` to `exp2`), which are not
/// always libm's bits (1 ulp apart on a few of 4096 inputs): tier 1 and the optimised tier
/// of one function disagreed. A `nobuiltin` call is left alone.
///
/// # Safety
/// `llctx` is the context of the valid module `m`.
unsafe fn opaque_pow(llctx: Raw, m: Raw) {
    // SAFETY: LLVM-C on a valid module and its context (caller); instructions are replaced
    // after the walk that found them.
    unsafe {
        let nobuiltin = LLVMGetEnumAttributeKindForName(c"nobuiltin".as_ptr(), 9);
        if nobuiltin == 0 {
            return;
        }
        let mut calls: Vec<(Raw, bool)> = vec![];
        let mut f = LLVMGetFirstFunction(m);
        while !f.is_null() {
            let mut bb = LLVMGetFirstBasicBlock(f);
            while !bb.is_null() {
                let mut i = LLVMGetFirstInstruction(bb);
                while !i.is_null() {
                    if !LLVMIsACallInst(i).is_null() {
                        let callee = LLVMGetCalledValue(i);
                        let mut len = 0usize;
                        let name = LLVMGetValueName2(callee, &mut len);
                        if !name.is_null() {
                            match std::slice::from_raw_parts(name as *const u8, len) {
                                b"llvm.pow.f32" => calls.push((i, false)),
                                b"llvm.pow.f64" => calls.push((i, true)),
                                _ => {}
                            }
                        }
                    }
                    i = LLVMGetNextInstruction(i);
                }
                bb = LLVMGetNextBasicBlock(bb);
            }
            f = LLVMGetNextFunction(f);
        }
        if calls.is_empty() {
            return;
        }
        let b = LLVMCreateBuilderInContext(llctx);
        let empty = c"";
        for (call, f64) in calls {
            let (x, y) = (LLVMGetOperand(call, 0), LLVMGetOperand(call, 1));
            let t = LLVMTypeOf(x);
            let name: &CStr = if f64 { c"pow" } else { c"powf" };
            let mut ps = [t, t];
            let fty = LLVMFunctionType(t, ps.as_mut_ptr(), 2, 0);
            let mut libm = LLVMGetNamedFunctionWithLength(m, name.as_ptr(), name.to_bytes().len());
            if libm.is_null() {
                libm = LLVMAddFunction(m, name.as_ptr(), fty);
            }
            LLVMPositionBuilderBefore(b, call);
            let mut args = [x, y];
            let new = LLVMBuildCall2(b, fty, libm, args.as_mut_ptr(), 2, empty.as_ptr());
            LLVMAddCallSiteAttribute(new, ATTRIBUTE_FUNCTION_INDEX, LLVMCreateEnumAttribute(llctx, nobuiltin, 0));
            LLVMReplaceAllUsesWith(call, new);
            LLVMInstructionEraseFromParent(call);
        }
        LLVMDisposeBuilder(b);
    }
}

pub(super) unsafe fn prepare_module(llctx: Raw, m: Raw, entry: &CStr, packed: &CStr) -> Result<(), String> {
    // SAFETY: LLVM-C on a valid module; the builder is disposed here.
    unsafe {
        let f = LLVMGetNamedFunction(m, entry.as_ptr());
        if f.is_null() {
            return Err(format!("the module has no function `{}`", entry.to_string_lossy()));
        }
        let internalize = |g: Raw| {
            if LLVMIsDeclaration(g) == 0 && !matches!(LLVMGetLinkage(g), LINKAGE_APPENDING | LINKAGE_INTERNAL | LINKAGE_PRIVATE) {
                LLVMSetLinkage(g, LINKAGE_INTERNAL);
                if !LLVMGetComdat(g).is_null() {
                    LLVMSetComdat(g, std::ptr::null_mut());
                }
            }
        };
        let mut g = LLVMGetFirstGlobal(m);
        while !g.is_null() {
            internalize(g);
            g = LLVMGetNextGlobal(g);
        }
        let mut h = LLVMGetFirstFunction(m);
        while !h.is_null() {
            internalize(h);
            h = LLVMGetNextFunction(h);
        }
        mark_allocators(llctx, m);
        opaque_pow(llctx, m);
        // void packed(ptr args) { f(*(T0*)args[0], ..., *(Tn*)args[n]); }
        let fty = LLVMGlobalGetValueType(f);
        if LLVMGetTypeKind(LLVMGetReturnType(fty)) != TYPE_KIND_VOID {
            return Err(format!("`{}` returns a value (expected results in output parameters)", entry.to_string_lossy()));
        }
        let n = LLVMCountParamTypes(fty);
        let mut params: Vec<Raw> = vec![std::ptr::null_mut(); n as usize];
        LLVMGetParamTypes(fty, params.as_mut_ptr());
        if params.iter().any(|&t| LLVMGetTypeKind(t) != TYPE_KIND_POINTER) {
            return Err(format!("`{}` takes a parameter that is not a pointer (expected memref descriptors)", entry.to_string_lossy()));
        }
        let ptr = LLVMPointerTypeInContext(llctx, 0);
        let i64t = LLVMInt64TypeInContext(llctx);
        let mut one = [ptr];
        let wty = LLVMFunctionType(LLVMVoidTypeInContext(llctx), one.as_mut_ptr(), 1, 0);
        let w = LLVMAddFunction(m, packed.as_ptr(), wty);
        let na = LLVMGetAttributeCountAtIndex(f, ATTRIBUTE_FUNCTION_INDEX);
        let mut attrs: Vec<Raw> = vec![std::ptr::null_mut(); na as usize];
        if na > 0 {
            LLVMGetAttributesAtIndex(f, ATTRIBUTE_FUNCTION_INDEX, attrs.as_mut_ptr());
        }
        for a in attrs {
            LLVMAddAttributeAtIndex(w, ATTRIBUTE_FUNCTION_INDEX, a);
        }
        let b = LLVMCreateBuilderInContext(llctx);
        let empty = c"";
        LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(llctx, w, c"entry".as_ptr()));
        let argv = LLVMGetParam(w, 0);
        let mut vals: Vec<Raw> = Vec::with_capacity(n as usize);
        for (i, t) in params.iter().enumerate() {
            let mut idx = [LLVMConstInt(i64t, i as u64, 0)];
            let slot = LLVMBuildGEP2(b, ptr, argv, idx.as_mut_ptr(), 1, empty.as_ptr());
            let p = LLVMBuildLoad2(b, ptr, slot, empty.as_ptr());
            vals.push(LLVMBuildLoad2(b, *t, p, empty.as_ptr()));
        }
        LLVMBuildCall2(b, fty, f, vals.as_mut_ptr(), n, empty.as_ptr());
        LLVMBuildRetVoid(b);
        LLVMDisposeBuilder(b);
        Ok(())
    }
}

/// `LLVMAttributeFunctionIndex`.
const ATTRIBUTE_FUNCTION_INDEX: u32 = u32::MAX;
/// `LLVMAttributeReturnIndex`.
const ATTRIBUTE_RETURN_INDEX: u32 = 0;
/// `LLVMAppendingLinkage`.
const LINKAGE_APPENDING: u32 = 7;
/// `LLVMPrivateLinkage`.
const LINKAGE_PRIVATE: u32 = 9;
/// `LLVMPointerTypeKind`.
const TYPE_KIND_POINTER: u32 = 12;
/// `LLVMInternalLinkage`.
const LINKAGE_INTERNAL: u32 = 8;
/// `LLVMVoidTypeKind`.
const TYPE_KIND_VOID: u32 = 0;
