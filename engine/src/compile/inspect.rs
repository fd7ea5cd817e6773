//! Looking inside a compile: native assembly of an executable and the IR before and after
//! each pass of the compile pipelines (`%compile --stage asm`, `%diff-passes`).
//!
//! Assembly comes from LLVM's own code generator through its C API, with no external tool:
//! the kept LLVM-dialect module is translated to LLVM IR (`mlirTranslateModuleToLLVMIR`),
//! optimized with the new pass manager's `default<On>` pipeline (`LLVMRunPasses`, the
//! pipeline the ExecutionEngine runs at the same level) and emitted as assembly by a
//! target machine for the host triple, CPU name and features
//! (`LLVMTargetMachineEmitToMemoryBuffer`, AT&T syntax on x86-64). The shared JIT
//! (`orc`) builds its target machines from the same host description, relocation model
//! (PIC) and code model (small), so the text is the code that runs, up to the packed entry
//! and symbol addresses.
//!
//! Pass diffs parse the module the compile stage parses (with the entry wrapper), split the
//! two textual pipelines (`context::PIPELINE_TO_LOOPS`, `PIPELINE_TO_LLVM`) into their
//! top-level passes and run them one at a time, printing the module after each; a pass
//! that changed the text gets a unified diff (the `similar` crate). This goes beyond JAX
//! (XLA's `--xla_dump_hlo_pass_re` is the nearest thing).

use super::context::{self, context, Diagnostics};
use super::Executable;
use crate::error::Error;
use crate::lower::LoweredModule;
use melior::ir::Module;
use mlir_sys::{mlirModuleGetOperation, mlirTranslateModuleToLLVMIR, LLVMContextCreate, LLVMContextDispose, LLVMDisposeModule, LLVMModuleRef};
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;

type Raw = *mut c_void;

// LLVM-C (llvm-c/TargetMachine.h, Target.h, Transforms/PassBuilder.h, Error.h, Core.h):
// exported by the shared libLLVM that mlir-sys links.
unsafe extern "C" {
    fn LLVMGetDefaultTargetTriple() -> *mut c_char;
    fn LLVMGetHostCPUName() -> *mut c_char;
    fn LLVMGetHostCPUFeatures() -> *mut c_char;
    fn LLVMDisposeMessage(m: *mut c_char);
    fn LLVMGetTargetFromTriple(triple: *const c_char, t: *mut Raw, err: *mut *mut c_char) -> i32;
    fn LLVMCreateTargetMachine(t: Raw, triple: *const c_char, cpu: *const c_char, features: *const c_char, level: u32, reloc: u32, model: u32) -> Raw;
    fn LLVMDisposeTargetMachine(tm: Raw);
    fn LLVMCreateTargetDataLayout(tm: Raw) -> Raw;
    fn LLVMDisposeTargetData(td: Raw);
    fn LLVMSetModuleDataLayout(m: LLVMModuleRef, dl: Raw);
    fn LLVMSetTarget(m: LLVMModuleRef, triple: *const c_char);
    fn LLVMCreatePassBuilderOptions() -> Raw;
    fn LLVMDisposePassBuilderOptions(o: Raw);
    fn LLVMRunPasses(m: LLVMModuleRef, passes: *const c_char, tm: Raw, o: Raw) -> Raw;
    fn LLVMGetErrorMessage(e: Raw) -> *mut c_char;
    fn LLVMDisposeErrorMessage(m: *mut c_char);
    fn LLVMTargetMachineEmitToMemoryBuffer(tm: Raw, m: LLVMModuleRef, kind: u32, err: *mut *mut c_char, out: *mut Raw) -> i32;
    fn LLVMGetBufferStart(b: Raw) -> *const c_char;
    fn LLVMGetBufferSize(b: Raw) -> usize;
    fn LLVMDisposeMemoryBuffer(b: Raw);
    fn LLVMCreateBinary(buf: Raw, ctx: Raw, err: *mut *mut c_char) -> Raw;
    fn LLVMDisposeBinary(b: Raw);
    fn LLVMObjectFileCopySectionIterator(b: Raw) -> Raw;
    fn LLVMObjectFileIsSectionIteratorAtEnd(b: Raw, si: Raw) -> i32;
    fn LLVMMoveToNextSection(si: Raw);
    fn LLVMDisposeSectionIterator(si: Raw);
    fn LLVMGetSectionName(si: Raw) -> *const c_char;
    fn LLVMGetSectionSize(si: Raw) -> u64;
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    fn LLVMInitializeX86TargetInfo();
    fn LLVMInitializeX86Target();
    fn LLVMInitializeX86TargetMC();
    fn LLVMInitializeX86AsmPrinter();
}
#[cfg(target_arch = "aarch64")]
unsafe extern "C" {
    fn LLVMInitializeAArch64TargetInfo();
    fn LLVMInitializeAArch64Target();
    fn LLVMInitializeAArch64TargetMC();
    fn LLVMInitializeAArch64AsmPrinter();
}

/// Registers the host's LLVM target (once per process: LLVM's target registry is not
/// safe to register into from two threads at once).
pub(super) fn init_native_target() -> Result<(), Error> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut r = Ok(());
    ONCE.call_once(|| r = register_native_target());
    r
}

fn register_native_target() -> Result<(), Error> {
    // SAFETY: LLVM's target initializers are idempotent and take no arguments.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        LLVMInitializeX86TargetInfo();
        LLVMInitializeX86Target();
        LLVMInitializeX86TargetMC();
        LLVMInitializeX86AsmPrinter();
        Ok(())
    }
    #[cfg(target_arch = "aarch64")]
    unsafe {
        LLVMInitializeAArch64TargetInfo();
        LLVMInitializeAArch64Target();
        LLVMInitializeAArch64TargetMC();
        LLVMInitializeAArch64AsmPrinter();
        Ok(())
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    Err(Error::compile("assembly output is only wired for x86-64 and AArch64 hosts"))
}

/// Takes an LLVM-allocated message.
pub(super) unsafe fn take_message(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: caller passes a NUL-terminated string from LLVM, disposed once here.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { LLVMDisposeMessage(p) };
    s
}

/// The host's target triple, CPU name and CPU features as LLVM sees them (part of the
/// persistent compilation cache's key: native code is only reused on the same target).
pub(super) fn host_description() -> String {
    // SAFETY: each LLVM-allocated string is copied and disposed once by `take_message`.
    unsafe {
        let t = take_message(LLVMGetDefaultTargetTriple());
        let c = take_message(LLVMGetHostCPUName());
        let f = take_message(LLVMGetHostCPUFeatures());
        format!("{t}\n{c}\n{f}")
    }
}

/// What `emit` produces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Emit {
    /// Assembly text.
    Assembly,
    /// The summed size of the object file's executable (`.text*`, and `.ltext*` of the large
    /// code model) sections, as decimal text.
    CodeSize,
}

/// Native code of an LLVM-dialect module, optimized at `opt_level` (0–3) for the host.
/// Errors (`Compile`): translation, the LLVM pass pipeline or code generation failed.
fn emit(module: &Module, opt_level: u8, what: Emit, diags: &Diagnostics) -> Result<String, Error> {
    init_native_target()?;
    let level = opt_level.min(3);
    // SAFETY: every LLVM object is created and disposed here, in reverse order; the
    // module is a valid LLVM-dialect module under the context lock held by the caller.
    unsafe {
        let triple = LLVMGetDefaultTargetTriple();
        let cpu = LLVMGetHostCPUName();
        let features = LLVMGetHostCPUFeatures();
        let mut target: Raw = std::ptr::null_mut();
        let mut err: *mut c_char = std::ptr::null_mut();
        let cleanup_strings = |t, c, f| {
            take_message(t);
            take_message(c);
            take_message(f);
        };
        if LLVMGetTargetFromTriple(triple, &mut target, &mut err) != 0 {
            let msg = take_message(err);
            cleanup_strings(triple, cpu, features);
            return Err(Error::compile(format!("no LLVM target for the host: {msg}")));
        }
        // The shared JIT's target machines (`orc`): its code generator level,
        // LLVMRelocPIC = 2, LLVMCodeModelSmall = 3.
        let tm = LLVMCreateTargetMachine(target, triple, cpu, features, super::orc::codegen_level(level), 2, 3);
        let llctx = LLVMContextCreate();
        let m = mlirTranslateModuleToLLVMIR(mlirModuleGetOperation(module.to_raw()), llctx);
        let result = if m.is_null() {
            Err(diags.error("translation to LLVM IR failed"))
        } else {
            LLVMSetTarget(m, triple);
            let dl = LLVMCreateTargetDataLayout(tm);
            LLVMSetModuleDataLayout(m, dl);
            LLVMDisposeTargetData(dl);
            // As the JIT compiles it: the packed entry, other definitions internal.
            if let Err(e) = super::orc::prepare_module(llctx as Raw, m as Raw, c"_mlir_ciface_jaxrepl_entry", c"jaxrepl_packed") {
                LLVMDisposeModule(m);
                LLVMDisposeTargetMachine(tm);
                LLVMContextDispose(llctx);
                cleanup_strings(triple, cpu, features);
                return Err(Error::compile(e));
            }
            let opts = LLVMCreatePassBuilderOptions();
            super::orc::set_tuning(opts);
            let pipeline = CString::new(format!("default<O{level}>")).expect("no NUL");
            let perr = LLVMRunPasses(m, pipeline.as_ptr(), tm, opts);
            LLVMDisposePassBuilderOptions(opts);
            let r = if !perr.is_null() {
                let p = LLVMGetErrorMessage(perr);
                let msg = CStr::from_ptr(p).to_string_lossy().into_owned();
                LLVMDisposeErrorMessage(p);
                Err(Error::compile(format!("LLVM's default<O{level}> pipeline failed: {msg}")))
            } else {
                let mut buf: Raw = std::ptr::null_mut();
                let mut err: *mut c_char = std::ptr::null_mut();
                // LLVMAssemblyFile = 0, LLVMObjectFile = 1.
                let kind = if what == Emit::Assembly { 0 } else { 1 };
                if LLVMTargetMachineEmitToMemoryBuffer(tm, m, kind, &mut err, &mut buf) != 0 {
                    Err(Error::compile(format!("code emission failed: {}", take_message(err))))
                } else if what == Emit::CodeSize {
                    // The binary takes no ownership of the buffer.
                    let mut err: *mut c_char = std::ptr::null_mut();
                    let bin = LLVMCreateBinary(buf, llctx as Raw, &mut err);
                    let r = if bin.is_null() {
                        Err(Error::compile(format!("cannot read the emitted object: {}", take_message(err))))
                    } else {
                        let si = LLVMObjectFileCopySectionIterator(bin);
                        let mut size = 0u64;
                        while LLVMObjectFileIsSectionIteratorAtEnd(bin, si) == 0 {
                            let name = LLVMGetSectionName(si);
                            // The large code model puts code in `.ltext` (x86-64), others in `.text`.
                            let n = if name.is_null() { &b""[..] } else { CStr::from_ptr(name).to_bytes() };
                            if n.starts_with(b".text") || n.starts_with(b".ltext") {
                                size += LLVMGetSectionSize(si);
                            }
                            LLVMMoveToNextSection(si);
                        }
                        LLVMDisposeSectionIterator(si);
                        LLVMDisposeBinary(bin);
                        Ok(size.to_string())
                    };
                    LLVMDisposeMemoryBuffer(buf);
                    r
                } else {
                    let bytes = std::slice::from_raw_parts(LLVMGetBufferStart(buf) as *const u8, LLVMGetBufferSize(buf));
                    let s = String::from_utf8_lossy(bytes).into_owned();
                    LLVMDisposeMemoryBuffer(buf);
                    Ok(s)
                }
            };
            LLVMDisposeModule(m);
            r
        };
        LLVMContextDispose(llctx);
        LLVMDisposeTargetMachine(tm);
        cleanup_strings(triple, cpu, features);
        result
    }
}

impl Executable {
    /// Native assembly (AT&T syntax on x86-64) of this executable's code, as LLVM's code
    /// generator emits it for the host CPU at `opt_level` (0–3; use the level it was
    /// compiled with, 2 by default). Errors (`Compile`): translation or code generation
    /// failed, or the host architecture is neither x86-64 nor AArch64.
    pub fn assembly(&self, opt_level: u8) -> Result<String, Error> {
        self.with_llvm_module(|m, diags| emit(m, opt_level, Emit::Assembly, diags))
    }

    /// Bytes of machine code (the object file's `.text` sections) LLVM generates for this
    /// executable at `opt_level`: `generated_code_size_in_bytes` of `memory_analysis`.
    /// Errors (`Compile`): as `assembly`.
    pub fn code_size(&self, opt_level: u8) -> Result<u64, Error> {
        Ok(self.with_llvm_module(|m, diags| emit(m, opt_level, Emit::CodeSize, diags))?.parse().unwrap_or(0))
    }
}

/// Scratch bytes of an optimized (bufferized) module: the summed sizes of its statically
/// shaped `memref.alloc`/`memref.alloca` results (the buffers beyond arguments and
/// results; dynamic shapes cannot occur). Element sizes: `f64`/`i64` 8, `f32`/`i32` 4,
/// `f16`/`bf16`/`i16` 2, `i8`/`i1` 1, `index` 8.
pub fn temp_bytes(optimized_ir: &str) -> u64 {
    let mut total = 0u64;
    for line in optimized_ir.lines() {
        if !(line.contains("memref.alloc()") || line.contains("memref.alloca()")) {
            continue;
        }
        let Some(ty) = line.rsplit(": memref<").next().filter(|_| line.contains(": memref<")) else { continue };
        let ty = ty.split('>').next().unwrap_or("");
        let ty = ty.split(',').next().unwrap_or("");
        let mut parts: Vec<&str> = ty.split('x').collect();
        let elem = parts.pop().unwrap_or("");
        let bytes = match elem.trim() {
            "f64" | "i64" | "index" => 8,
            "f32" | "i32" => 4,
            "f16" | "bf16" | "i16" => 2,
            "i8" | "i1" => 1,
            _ => continue,
        };
        let dims: Option<u64> = parts.iter().map(|d| d.trim().parse::<u64>().ok()).product();
        if let Some(n) = dims {
            total += n * bytes;
        }
    }
    total
}

/// One pass of the compile pipelines and what it did to the module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassDiff {
    /// The pass as written in the pipeline (with its options), e.g. `one-shot-bufferize{...}`.
    pub pass: String,
    /// Which pipeline it belongs to: `"to-loops"` or `"to-llvm"`.
    pub pipeline: &'static str,
    /// Unified diff of the module text before → after (3 lines of context); empty when the
    /// pass left the text unchanged.
    pub diff: String,
}

/// The passes of a compile, in order (`%diff-passes`). Prints like MLIR's
/// `--mlir-print-ir-after-change` headers followed by a unified diff per changed pass, and
/// a closing line naming the passes that changed nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassDiffs(pub Vec<PassDiff>);

impl PassDiffs {
    /// The passes that changed the module, in order.
    pub fn changed(&self) -> impl Iterator<Item = &PassDiff> {
        self.0.iter().filter(|p| !p.diff.is_empty())
    }
}

impl fmt::Display for PassDiffs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.changed() {
            writeln!(f, "// -----// IR Dump After {} ({}) //----- //", p.pass, p.pipeline)?;
            f.write_str(&p.diff)?;
        }
        let same: Vec<&str> = self.0.iter().filter(|p| p.diff.is_empty()).map(|p| p.pass.as_str()).collect();
        write!(f, "{} of {} passes changed the module", self.changed().count(), self.0.len())?;
        if !same.is_empty() {
            write!(f, "; unchanged: {}", same.join(", "))?;
        }
        Ok(())
    }
}

/// The top-level passes of a textual pipeline `builtin.module(a,b{x=1},c)`, with options.
pub fn split_pipeline(pipeline: &str) -> Vec<String> {
    let inner = pipeline.trim().strip_prefix("builtin.module(").and_then(|s| s.strip_suffix(')')).unwrap_or(pipeline);
    let mut out = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in inner.chars() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// Runs the compile pipelines on `module` one pass at a time (the same passes, in the same
/// order, as `compile`) and diffs the module text around each.
/// Errors (`Compile`): the module does not parse or a pass fails (with MLIR's diagnostics).
pub fn diff_passes(module: &LoweredModule) -> Result<PassDiffs, Error> {
    let src = super::with_entry(module, &super::parse_aliases(module))?;
    let guard = context();
    let ctx = &guard.ctx;
    let diags = Diagnostics::capture(ctx);
    let mut m = Module::parse(ctx, &src).ok_or_else(|| diags.error("the lowered module does not parse"))?;
    let mut before = m.as_operation().to_string();
    let mut out = Vec::new();
    for (name, pipeline) in [("to-loops", context::PIPELINE_TO_LOOPS), ("to-llvm", context::PIPELINE_TO_LLVM)] {
        let mut passes = split_pipeline(pipeline);
        if name == "to-llvm" && src.contains("math.ipowi") {
            // `context::run_to_llvm`'s first stage.
            passes.insert(0, "convert-math-to-funcs".to_string());
        }
        for pass in passes {
            context::run_pipeline(ctx, &mut m, &format!("builtin.module({pass})"), &diags)?;
            let after = m.as_operation().to_string();
            let fused = pass == "linalg-fuse-elementwise-ops" && name == "to-loops";
            out.push(PassDiff { pass, pipeline: name, diff: unified_diff(&before, &after) });
            before = after;
            if fused {
                // The compile's in-place rewrite of loop carries (not a registered pass,
                // `context::run_to_loops`) runs right after fusion.
                super::inplace::loop_carries_in_place(&m);
                let after = m.as_operation().to_string();
                out.push(PassDiff { pass: context::LOOP_CARRIES_IN_PLACE.to_string(), pipeline: name, diff: unified_diff(&before, &after) });
                before = after;
            }
        }
        if name == "to-loops" {
            // Results written straight into the output parameters (not a registered pass,
            // `context::run_to_loops`), after bufferization.
            super::inplace::outputs_in_place(&m);
            let after = m.as_operation().to_string();
            out.push(PassDiff { pass: context::OUTPUTS_IN_PLACE.to_string(), pipeline: name, diff: unified_diff(&before, &after) });
            before = after;
        }
    }
    // The compile's last step on the LLVM dialect (not a registered pass): FMA contraction
    // allowed, as XLA:CPU (`context::fuse_multiply_adds`).
    context::fuse_multiply_adds(ctx, &m);
    let after = m.as_operation().to_string();
    out.push(PassDiff { pass: "fuse-multiply-adds".to_string(), pipeline: "to-llvm", diff: unified_diff(&before, &after) });
    drop(m);
    drop(diags);
    drop(guard);
    Ok(PassDiffs(out))
}

/// The unified diff (3 lines of context, headers `before`/`after`) from `before` to
/// `after`; empty when the texts are equal (a pass that changed nothing).
fn unified_diff(before: &str, after: &str) -> String {
    if after == before {
        return String::new();
    }
    similar::TextDiff::from_lines(before, after).unified_diff().context_radius(3).header("before", "after").to_string()
}
