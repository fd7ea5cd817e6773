//! Loading native code from an object file without MLIR or LLVM's optimiser: the
//! persistent compilation cache's hit path.
//!
//! An entry of the cache holds the relocatable object the ExecutionEngine compiled (see
//! `persistent`). Here it is linked into a fresh ORC `LLJIT` (LLVM-C's `LLJIT.h`/`Orc.h`,
//! exported by the shared libLLVM the engine already links): the runtime symbols compiled
//! code calls (host callbacks, `memrefCopy`, the GEMM runtime) are defined as absolute
//! symbols from the same tables the ExecutionEngine path registers, everything else
//! (libm, libc) resolves in the process, and libomp is searched by path for modules of
//! the parallel pipeline. Linking an object runs no pass pipeline and no code generator.
//!
//! Invariant: a `LoadedCode` owns its JIT; the entry pointer it returns is valid until the
//! `LoadedCode` is dropped. Every failure is an `Err(String)` (the caller ignores the entry
//! and recompiles), never a crash.

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
        let mut pgen: Raw = std::ptr::null_mut();
        check(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&mut pgen, prefix, None, std::ptr::null_mut()), "process symbols")?;
        LLVMOrcJITDylibAddGenerator(jd, pgen);
        if let Some(path) = libomp {
            let p = CString::new(path).map_err(|e| e.to_string())?;
            let mut g: Raw = std::ptr::null_mut();
            check(LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&mut g, p.as_ptr(), prefix, None, std::ptr::null_mut()), "libomp")?;
            LLVMOrcJITDylibAddGenerator(jd, g);
        }
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
