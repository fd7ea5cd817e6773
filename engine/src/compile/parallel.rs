//! Multi-threaded kernels: large loop nests run on all cores through OpenMP.
//!
//! A module with a tensor of at least [`PAR_MIN_WORK`] elements is compiled in three steps
//! instead of `PIPELINE_TO_LOOPS`:
//! 1. [`PIPELINE_FUSE`] (inlining, generalisation, elementwise fusion, on tensors);
//! 2. every *top-level* `linalg.generic` (not inside a loop or branch of the computation)
//!    whose first loop is parallel, spans at least 2 iterations, and iterates at least
//!    [`PAR_MIN_WORK`] times in all ([`PAR_MIN_WORK_WITH_GEMM`] in a module calling the GEMM runtime) is tagged `jaxrepl.par<k>` (on the printed module, see
//!    [`tag_parallel`]) and tiled along that first loop into `scf.forall` chunks by a
//!    transform-dialect schedule (`tile_using_forall … num_threads [t]`, `t` = the number
//!    of chunks, at most the loop's extent);
//! 3. [`PIPELINE_PAR_TO_LOOPS`] bufferizes and turns each `scf.forall` into an
//!    `scf.parallel`, and [`PIPELINE_PAR_TO_LLVM`] lowers those to OpenMP
//!    (`convert-scf-to-openmp`, libomp loaded into the engine).
//!
//! Small modules never take this path, so small calls keep their single-threaded code and
//! dispatch cost. Reductions keep their per-element order (only parallel loops are split;
//! long reductions were already split into a fixed number of partial results by the
//! lowering, see `lower::REDUCE_SPLIT_PARTS`), so results do not depend on the thread
//! count. If any step fails, the caller compiles the module single-threaded instead.
//!
//! Measured on 2 cores (issue 4; MLIR spike in `/work/shared/mlir-codegen.md` §5):
//! OpenMP over `scf.forall` chunks of a vectorised elementwise kernel gave 2.1×.

use std::ffi::{c_char, c_void, CString};
use std::sync::OnceLock;

/// Loop nests iterating fewer times than this stay on one thread (an OpenMP fork/join
/// costs a few µs with spinning workers, tens of µs when they sleep; 2^17 f32 elements
/// take about 50 µs to stream on one core).
pub const PAR_MIN_WORK: usize = 1 << 17;

/// [`PAR_MIN_WORK`] in a module that calls the GEMM runtime (`compile::gemm`, threaded on
/// rayon's pool): OpenMP's workers spin for `KMP_BLOCKTIME` (1 ms) after each parallel
/// region, taking the second core from the products that follow (measured on the MLP
/// training step, whose 512² parameter updates sit between its weight-gradient products).
/// Only loop nests long enough to amortise that (4 MiB of f32) are split there.
pub const PAR_MIN_WORK_WITH_GEMM: usize = 1 << 20;

/// The least work of a loop nest split over threads in module `text`: [`PAR_MIN_WORK`], or
/// [`PAR_MIN_WORK_WITH_GEMM`] when the module calls the GEMM runtime.
pub fn par_min_work(text: &str) -> usize {
    if text.contains("@jaxrepl_gemm_") {
        PAR_MIN_WORK_WITH_GEMM
    } else {
        PAR_MIN_WORK
    }
}

/// The OpenMP runtime the engine loads for parallel modules (apt `libomp-22-dev`).
pub const LIBOMP: &str = "/usr/lib/llvm-22/lib/libomp.so";

/// Stage 1 of a parallel compile: the start of `PIPELINE_TO_LOOPS`, on tensors.
pub const PIPELINE_FUSE: &str =
    "builtin.module(arith-expand{include-bf16=true},inline{default-pipeline=},symbol-dce,linalg-generalize-named-ops,linalg-fuse-elementwise-ops)";

/// Stage 3: the rest of `PIPELINE_TO_LOOPS`, with `scf.forall` chunks as `scf.parallel`.
pub const PIPELINE_PAR_TO_LOOPS: &str = "builtin.module(canonicalize,cse,\
eliminate-empty-tensors,one-shot-bufferize{allow-return-allocs-from-loops bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},\
buffer-deallocation-pipeline,convert-bufferization-to-memref,scf-forall-to-parallel,convert-linalg-to-loops,canonicalize,cse)";

/// `PIPELINE_TO_LLVM` with `convert-scf-to-openmp` (run before `convert-scf-to-cf`, after
/// memref lowering: the OpenMP region's `alloca_scope` must keep a single block) and
/// `convert-openmp-to-llvm`.
pub const PIPELINE_PAR_TO_LLVM: &str = "builtin.module(lower-affine,convert-scf-to-openmp,\
expand-strided-metadata,lower-affine,finalize-memref-to-llvm{use-aligned-alloc=true use-generic-functions=true},convert-scf-to-cf,convert-math-to-llvm,convert-math-to-libm,arith-expand{include-bf16=true},\
convert-arith-to-llvm,convert-index-to-llvm,convert-ub-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,convert-openmp-to-llvm,\
reconcile-unrealized-casts)";

/// Number of threads parallel kernels use: `JAXREPL_NUM_THREADS` if set (read once; 1
/// turns the parallel path off), else the machine's available parallelism.
pub fn num_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("JAXREPL_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    })
}

/// Whether `text` (a lowered module) has a tensor type of at least [`par_min_work`]
/// elements, the cheap test for trying the parallel path at all. False when only one
/// thread is available or libomp is missing.
pub fn wants_parallel(text: &str) -> bool {
    if num_threads() < 2 || !libomp_present() {
        return false;
    }
    let min = par_min_work(text);
    text.match_indices("tensor<").any(|(i, _)| {
        let rest = &text[i + 7..];
        let end = rest.find('>').unwrap_or(rest.len());
        static_size(&rest[..end]).is_some_and(|n| n >= min)
    })
}

fn libomp_present() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| std::path::Path::new(LIBOMP).exists())
}

/// Element count of a tensor type body like `4096x1024xf32` (None if a dim is dynamic).
fn static_size(body: &str) -> Option<usize> {
    let mut parts: Vec<&str> = body.split('x').collect();
    parts.pop(); // the element type
    parts.iter().try_fold(1usize, |acc, d| d.trim().parse::<usize>().ok().map(|v| acc.saturating_mul(v)))
}

/// Shape of a ranked static tensor type `tensor<AxBxT>` (scalars give `[]`, None when the
/// type is not a static tensor).
fn tensor_shape(ty: &str) -> Option<Vec<usize>> {
    let t = ty.trim();
    if !t.starts_with("tensor<") {
        return Some(vec![]); // a scalar operand
    }
    let body = t.strip_prefix("tensor<")?.strip_suffix('>')?;
    let mut parts: Vec<&str> = body.split('x').collect();
    parts.pop();
    parts.iter().map(|d| d.parse().ok()).collect()
}

/// Splits `s` at top-level commas (outside `<>`, `()` and `[]`).
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (vec![], String::new(), 0i32);
    for ch in s.chars() {
        match ch {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The types listed after ` : ` in `ins(...)` / `outs(...)` starting at `line[at..]`.
fn operand_types(line: &str, key: &str) -> Option<Vec<String>> {
    let at = line.find(key)? + key.len();
    let rest = &line[at..];
    // The operand list ends at the `)` matching `key`'s `(` (types may hold `<..>` only).
    let mut depth = 1i32;
    let mut end = None;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &rest[..end?];
    let colon = inner.find(" : ")?;
    Some(split_top(&inner[colon + 3..]))
}

/// Tags the top-level `linalg.generic`s of a printed (fused, tensor-level) module that are
/// worth running on several threads with `jaxrepl.par<k>` (k = 0, 1, ..) and returns the
/// new text with a transform schedule that tiles each into `scf.forall` chunks, plus the
/// number of ops tagged (0: the text is returned unchanged).
///
/// "Top-level" means at the entry function's own nesting depth (4 spaces of indentation
/// in MLIR's printer); ops inside loops and branches of the computation are left alone,
/// since a fork/join per iteration would cost more than it gains.
pub fn tag_parallel(text: &str, threads: usize) -> (String, usize) {
    // Affine map aliases: `#map1 = affine_map<(d0, d1) -> (d0)>`.
    let mut aliases: Vec<(String, String)> = vec![];
    for l in text.lines() {
        if let Some((name, def)) = l.split_once(" = affine_map<") {
            if name.starts_with('#') {
                aliases.push((name.trim().to_string(), def.trim_end_matches('>').to_string()));
            }
        }
    }
    let map_of = |m: &str| -> Option<String> {
        let m = m.trim();
        if let Some(inline) = m.strip_prefix("affine_map<") {
            return Some(inline.trim_end_matches('>').to_string());
        }
        aliases.iter().find(|(n, _)| n == m).map(|(_, d)| d.clone())
    };
    let min_work = par_min_work(text);
    let mut out = String::with_capacity(text.len() + 1024);
    let mut sched = String::new();
    let mut k = 0usize;
    for l in text.lines() {
        let chunks = (|| -> Option<usize> {
            let body = l.strip_prefix("    %")?;
            let at = body.find(" = linalg.generic {")?;
            let line = &body[at..];
            let dict_end = line.find("} ins(").or_else(|| line.find("} outs("))?;
            let dict = &line[" = linalg.generic {".len()..dict_end];
            let its = dict.split("iterator_types = [").nth(1)?;
            if !its.trim_start().starts_with("#linalg.iterator_type<parallel>") && !its.trim_start().starts_with("\"parallel\"") {
                return None;
            }
            let maps_s = dict.split("indexing_maps = [").nth(1)?;
            let maps = split_top(&maps_s[..maps_s.find(']')?]);
            let ins = if line.contains(" ins(") { operand_types(line, " ins(")? } else { vec![] };
            let outs = operand_types(line, " outs(")?;
            let shapes: Vec<Vec<usize>> = ins.iter().chain(&outs).map(|t| tensor_shape(t)).collect::<Option<_>>()?;
            let work = shapes.iter().map(|s| s.iter().product::<usize>()).max()?;
            if work < min_work || maps.len() != shapes.len() {
                return None;
            }
            // Extent of d0: an operand's dim whose map result is exactly `d0`.
            let extent = maps.iter().zip(&shapes).find_map(|(m, s)| {
                let def = map_of(m)?;
                let res = def.split("-> (").nth(1)?.trim_end_matches(')');
                let pos = split_top(res).iter().position(|r| r == "d0")?;
                s.get(pos).copied()
            })?;
            (extent >= 2).then_some(threads.min(extent))
        })();
        match chunks {
            Some(t) => {
                out.push_str(&l.replacen(" = linalg.generic {", &format!(" = linalg.generic {{jaxrepl.par{k}, "), 1));
                sched.push_str(&format!(
                    "    %m{k} = transform.structured.match ops{{[\"linalg.generic\"]}} attributes {{jaxrepl.par{k}}} in %root : (!transform.any_op) -> !transform.any_op\n\
                     \x20   %t{k}, %f{k} = transform.structured.tile_using_forall %m{k} num_threads [{t}] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
                ));
                k += 1;
            }
            None => out.push_str(l),
        }
        out.push('\n');
    }
    if k == 0 {
        return (text.to_string(), 0);
    }
    // Module attribute and the named sequence before the module's closing brace.
    // The module's own line (affine map aliases come before it).
    let mstart = if out.starts_with("module") { 0 } else { out.find("\nmodule").map_or(0, |i| i + 1) };
    let first_nl = mstart + out[mstart..].find('\n').unwrap_or(out.len() - mstart);
    let head = &out[mstart..first_nl];
    let head = if let Some(i) = head.find("attributes {") {
        format!("{}attributes {{transform.with_named_sequence, {}", &head[..i], &head[i + "attributes {".len()..])
    } else {
        format!("{} attributes {{transform.with_named_sequence}} {{", head.trim_end().trim_end_matches('{').trim_end())
    };
    let body = &out[first_nl..];
    let close = body.trim_end().rfind('}').unwrap_or(body.len());
    let text = format!(
        "{}{head}{}  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{\n{sched}    transform.yield\n  }}\n}}\n",
        &out[..mstart],
        &body[..close]
    );
    (text, k)
}

/// Lets libomp's idle workers sleep after 1 ms instead of spinning for its default
/// 200 ms (this machine's cores are shared), unless the user set `KMP_BLOCKTIME`.
/// Called once, after an engine loaded libomp and before its first parallel region.
pub fn configure_libomp() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if std::env::var_os("KMP_BLOCKTIME").is_some() {
            return;
        }
        unsafe extern "C" {
            fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        }
        let name = CString::new("kmp_set_defaults").expect("no NUL");
        // SAFETY: RTLD_DEFAULT (null on glibc) searches the global scope, where the engine
        // loaded libomp; the symbol is libomp's `void kmp_set_defaults(char const *)`.
        let f = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
        if !f.is_null() {
            let set: unsafe extern "C" fn(*const c_char) = unsafe { std::mem::transmute(f) };
            let v = CString::new(format!("KMP_BLOCKTIME={}", blocktime_ms())).expect("no NUL");
            // SAFETY: called before libomp's first parallel region in this process.
            unsafe { set(v.as_ptr()) };
        }
    });
}

fn blocktime_ms() -> u32 {
    std::env::var("JAXREPL_KMP_BLOCKTIME").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}
