//! The stage pipeline after tracing: jaxpr → (canonicalize) → lowered MLIR module →
//! executable, with the executable cache keyed on the lowered text and the compile
//! options. Invariant: identical lowered modules compile once per process, so a cell
//! that redefines an identical function retraces but does not recompile.

use crate::compile::{self, CompileOptions, Executable};
use crate::config;
use crate::error::Result;
use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, ShapedArray, Var};
use crate::lower::{self, LowerOptions, LoweredModule};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A shared compiled executable.
pub type ExecutableRef = Arc<Executable>;

/// Options that change what is lowered or compiled (part of the cache key).
#[derive(Clone, Debug, Default)]
pub struct StageOptions {
    /// Per flat argument: whether it is donated.
    pub donated: Vec<bool>,
    /// LLVM optimisation level (default 2).
    pub opt_level: Option<u8>,
    /// Per flat argument and per result: the memory kind (`LowerOptions`; empty: all
    /// `device`). Part of the lowered text, so of the executable cache key.
    pub in_memory_kinds: Vec<crate::runtime::MemoryKind>,
    /// Per result: its memory kind (empty: all `device`).
    pub out_memory_kinds: Vec<crate::runtime::MemoryKind>,
}

/// What compiling a jaxpr produced.
pub struct CompiledArtifacts {
    pub lowered: Arc<LoweredModule>,
    pub executable: ExecutableRef,
    /// Whether the executable came from the cache.
    pub cache_hit: bool,
    /// Seconds spent lowering and compiling (0 for a cache hit).
    pub lower_secs: f64,
    pub compile_secs: f64,
    /// What the persistent compilation cache did (`None` for an executable cache hit,
    /// where it is not consulted).
    pub persistent: Option<compile::persistent::Verdict>,
}

static COMPILES: AtomicU64 = AtomicU64::new(0);

/// How many executables this process has compiled (cache misses), for tests and `%explain`.
pub fn compile_count() -> u64 {
    COMPILES.load(Ordering::Relaxed)
}

fn exe_cache() -> &'static Mutex<HashMap<blake3::Hash, ExecutableRef>> {
    static C: OnceLock<Mutex<HashMap<blake3::Hash, ExecutableRef>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops every cached executable (JAX's `clear_caches`, executable part).
pub fn clear_executable_cache() {
    exe_cache().lock().unwrap_or_else(|e| e.into_inner()).clear();
    crate::partition::clear_plans();
}

/// Rewrites a jaxpr for lowering: 0-d operands of elementwise ops with shaped outputs
/// are broadcast explicitly (JAX prints `mul a 2.0:f32[]`; lowering wants equal shapes).
pub fn canonicalize(j: &Jaxpr) -> Jaxpr {
    let mut next = crate::lax::control::max_id(j) + 1;
    let mut eqns = Vec::with_capacity(j.eqns.len());
    for e in &j.eqns {
        let mut e = e.clone();
        e.primitive = match &e.primitive {
            Primitive::Pjit { name, jaxpr } => Primitive::Pjit {
                name: name.clone(),
                jaxpr: Box::new(ClosedJaxpr { jaxpr: canonicalize(&jaxpr.jaxpr), consts: jaxpr.consts.clone(), in_types: None }),
            },
            Primitive::Cond { branches } => Primitive::Cond { branches: branches.iter().map(canonicalize).collect() },
            Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => Primitive::While {
                cond_jaxpr: Box::new(canonicalize(cond_jaxpr)),
                body_jaxpr: Box::new(canonicalize(body_jaxpr)),
                cond_nconsts: *cond_nconsts,
                body_nconsts: *body_nconsts,
            },
            Primitive::Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => Primitive::Scan {
                jaxpr: Box::new(canonicalize(jaxpr)),
                length: *length,
                reverse: *reverse,
                unroll: *unroll,
                num_consts: *num_consts,
                num_carry: *num_carry,
            },
            Primitive::CustomJvpCall { name, call_jaxpr, rule, num_consts } => Primitive::CustomJvpCall {
                name: name.clone(),
                call_jaxpr: Box::new(canonicalize(call_jaxpr)),
                rule: *rule,
                num_consts: *num_consts,
            },
            Primitive::CustomVjpCall { name, call_jaxpr, rule, num_consts } => Primitive::CustomVjpCall {
                name: name.clone(),
                call_jaxpr: Box::new(canonicalize(call_jaxpr)),
                rule: *rule,
                num_consts: *num_consts,
            },
            Primitive::Checkpoint { jaxpr, policy } => Primitive::Checkpoint { jaxpr: Box::new(canonicalize(jaxpr)), policy: *policy },
            p => p.clone(),
        };
        let elementwise = e.primitive.is_binary_elementwise() || e.primitive == Primitive::SelectN;
        if elementwise {
            let shape = e.outputs[0].aval.shape.clone();
            if !shape.is_empty() {
                for inp in e.inputs.iter_mut() {
                    if inp.aval().shape.is_empty() {
                        let aval = ShapedArray { shape: shape.clone(), ..inp.aval().clone() };
                        let v = Var { id: next, aval };
                        next += 1;
                        eqns.push(Eqn {
                            primitive: Primitive::BroadcastInDim { shape: shape.clone(), broadcast_dimensions: vec![] },
                            inputs: vec![inp.clone()],
                            outputs: vec![v.clone()],
                            source: e.source.clone(),
                            name_stack: e.name_stack.clone(),
                            metadata: e.metadata.clone(),
                        });
                        *inp = Atom::Var(v);
                    }
                }
            }
        }
        eqns.push(e);
    }
    Jaxpr { eqns, ..j.clone() }
}

/// Lowers a closed jaxpr to an MLIR module (after `canonicalize`).
pub fn lower_closed(j: &ClosedJaxpr, name: &str, opts: &StageOptions) -> Result<LoweredModule> {
    let c = ClosedJaxpr { jaxpr: canonicalize(&j.jaxpr), consts: j.consts.clone(), in_types: None };
    let mut donated = opts.donated.clone();
    donated.resize(c.jaxpr.invars.len(), false);
    let (in_memory_kinds, out_memory_kinds) = (opts.in_memory_kinds.clone(), opts.out_memory_kinds.clone());
    lower::lower_jaxpr(&c, name, &LowerOptions { donated, in_memory_kinds, out_memory_kinds })
}

/// The process-wide compiler flags, `JAXREPL_FLAGS` (in the spirit of `XLA_FLAGS`):
/// `--name=value` words separated by spaces, e.g. `JAXREPL_FLAGS='--opt_level=3'` or
/// `'--optimization_level=O1'` (the keys of `compiler_options`; `--name` alone means
/// `true`). Read at the first compile; the LLVM optimisation level every compile starts
/// from (2 without the variable). Errors (at every compile while the variable is bad):
/// `ValueError: JAXREPL_FLAGS: ...` with the option's own error.
pub fn default_opt_level() -> Result<u8> {
    static FLAGS: OnceLock<std::result::Result<u8, String>> = OnceLock::new();
    let r = FLAGS.get_or_init(|| parse_flags(&std::env::var("JAXREPL_FLAGS").unwrap_or_default()));
    r.clone().map_err(crate::error::Error::value_error)
}

/// Parses `JAXREPL_FLAGS` text into the optimisation level (see `default_opt_level`).
pub(crate) fn parse_flags(text: &str) -> std::result::Result<u8, String> {
    let mut level = 2u8;
    for word in text.split_whitespace() {
        let Some(flag) = word.strip_prefix("--") else {
            return Err(format!("JAXREPL_FLAGS: expected --name=value, got '{word}'"));
        };
        let (k, v) = flag.split_once('=').unwrap_or((flag, "true"));
        if let Err(e) = super::stages::apply_compiler_option(&mut level, k, v) {
            return Err(format!("JAXREPL_FLAGS: {}", e.message));
        }
    }
    Ok(level)
}

#[cfg(test)]
mod flag_tests {
    #[test]
    fn jaxrepl_flags_parse() {
        assert_eq!(super::parse_flags(""), Ok(2));
        assert_eq!(super::parse_flags("--opt_level=3"), Ok(3));
        assert_eq!(super::parse_flags(" --optimization_level=O1 "), Ok(1));
        let e = super::parse_flags("--not_a_real_flag=1").unwrap_err();
        assert_eq!(e.lines().next(), Some("JAXREPL_FLAGS: No such compile option: 'not_a_real_flag'"), "{e}");
        assert_eq!(super::parse_flags("opt_level=3"), Err("JAXREPL_FLAGS: expected --name=value, got 'opt_level=3'".into()));
    }
}

/// Compiles a lowered module, through the executable cache (and the persistent
/// compilation cache when `jax_compilation_cache_dir` is set).
pub fn compile_lowered(m: &LoweredModule, opts: &StageOptions) -> Result<(ExecutableRef, bool)> {
    let (e, hit, v) = compile_lowered_verdict(m, opts)?;
    if let Some(line) = v.and_then(|v| v.hit_log).filter(|_| config::log_compiles()) {
        eprintln!("{line}");
    }
    Ok((e, hit))
}

/// On an executable-cache miss: the persistent cache's entry for `module`, loaded, or a
/// fresh compile (tiered) that writes it; with the persistent layer's verdict.
fn compile_persistent(module: &LoweredModule, opt_level: u8) -> Result<(Executable, compile::persistent::Verdict)> {
    use compile::persistent::{self, Load, Verdict};
    let opts = CompileOptions { opt_level };
    let Some(p) = persistent::pending(module, opt_level) else {
        return compile::compile_tiered(module, &opts).map(|e| (e, Verdict::off()));
    };
    let why = match persistent::load(&p, module, opt_level) {
        Load::Hit(exe, v) => return Ok((exe, v)),
        Load::Miss(why) | Load::Corrupt(why) => why,
    };
    let (e, what, later) = compile::compile_persistent_tiered(module, &opts, Some(Arc::new(p)))?;
    Ok((e, Verdict { hit: false, text: format!("miss ({why}); {what}"), later, hit_log: None }))
}

/// `compile_lowered`, also returning the persistent layer's verdict (`None` for an
/// executable cache hit).
pub fn compile_lowered_verdict(m: &LoweredModule, opts: &StageOptions) -> Result<(ExecutableRef, bool, Option<compile::persistent::Verdict>)> {
    let opt_level = match opts.opt_level {
        Some(l) => l,
        None => default_opt_level()?,
    };
    let mut h = blake3::Hasher::new();
    h.update(m.text.as_bytes());
    h.update(&[opt_level]);
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    // MLIR integers are signless: uint32 and int32 signatures can lower to the same text,
    // but the executable checks its argument and result dtypes, so they are in the key.
    for a in m.in_avals.iter().chain(&m.out_avals) {
        h.update(a.dtype.short_name().as_bytes());
    }
    let key = h.finalize();
    if m.text.contains(crate::lower::manual::MANUAL_MARK) {
        return Err(crate::error::Error::compile(
            "a module with a shard_map (sdy.manual_computation) is display only: jit runs shard_map as per-device segments cut at its collectives (%compile shows them)",
        ));
    }
    if let Some(e) = exe_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok((e.clone(), true, None));
    }
    // Compile on a helper thread so that an interrupt stops the wait at once; an
    // interrupted compile still finishes in the background and fills the cache.
    let (tx, rx) = std::sync::mpsc::channel();
    let module = m.clone();
    std::thread::Builder::new()
        .name("jax-compile".into())
        .spawn(move || {
            // Tiered (`jaxrepl_tiered_compilation`): a quick tier now that upgrades itself
            // to `opt_level` in the background; the cached record says which tier runs
            // (`Executable::tier`).
            // A persistent cache hit is linked, not compiled (`COMPILES` counts compiles).
            let r = compile_persistent(&module, opt_level).map(|(e, v)| (Arc::new(e), v));
            if let Ok((exe, v)) = &r {
                if !v.hit {
                    COMPILES.fetch_add(1, Ordering::Relaxed);
                }
                exe_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, exe.clone());
            }
            let _ = tx.send(r);
        })
        .map_err(|e| crate::error::Error::compile(format!("cannot start a compile thread: {e}")))?;
    // Long compiles are announced to an interactive session (crate::progress).
    let mut watch = crate::progress::Watch::start(&crate::compile::display_name(&m.text));
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(10)) {
            Ok(r) => return r.map(|(exe, v)| (exe, false, Some(v))),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                watch.tick();
                if crate::runtime::interrupt::take_if_set() {
                    return Err(crate::error::Error::interrupted());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(crate::error::Error::compile("the compile thread stopped without a result (it panicked)"));
            }
        }
    }
}

/// Lowers and compiles, logging like `jax_log_compiles` when that flag is on.
pub fn compile_jaxpr(j: &ClosedJaxpr, name: &str, opts: &StageOptions) -> Result<CompiledArtifacts> {
    let t0 = Instant::now();
    let span = crate::profiler::span("lower", || format!("lower jit({name})"));
    let lowered = Arc::new(lower_closed(j, name, opts)?);
    drop(span);
    let lower_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut span = crate::profiler::span("compile", || format!("compile jit({name})"));
    let (executable, cache_hit, persistent) = compile_lowered_verdict(&lowered, opts)?;
    if let Some(s) = span.as_mut() {
        s.arg("cache_hit", cache_hit);
    }
    drop(span);
    let compile_secs = t1.elapsed().as_secs_f64();
    if config::log_compiles() && !cache_hit {
        let avals: Vec<String> = j
            .jaxpr
            .invars
            .iter()
            .map(|v| {
                let strong = ShapedArray { weak_type: false, ..v.aval.clone() };
                format!("ShapedArray({}{})", strong.long(), if v.aval.weak_type { ", weak_type=True" } else { "" })
            })
            .collect();
        let tuple = if avals.len() == 1 { format!("({},)", avals[0]) } else { format!("({})", avals.join(", ")) };
        eprintln!("Compiling jit({name}) with global shapes and types {tuple}.");
        eprintln!("Finished jaxpr to MLIR module conversion jit({name}) in {lower_secs:.9} sec");
        let tier = match executable.tier() {
            1 => format!("tier 1, LLVM O{}; tier 2 at O{} compiles in the background from the second call", executable.running_opt_level(), opts.opt_level.unwrap_or_else(|| default_opt_level().unwrap_or(2))),
            _ => format!("tier 2, LLVM O{}", executable.running_opt_level()),
        };
        // A persistent cache hit compiled nothing: its hit line instead, after the
        // lowering's lines (JAX's order).
        match persistent.as_ref().and_then(|v| v.hit_log.as_ref()) {
            Some(line) => eprintln!("{line}"),
            None => eprintln!("Finished MLIR compilation of jit({name}) in {compile_secs:.9} sec ({tier})"),
        }
    }
    // Only when dumping: `optimized_ir()` reruns the loop pipeline on first request.
    if !cache_hit && !config::dump_ir_to().is_empty() {
        crate::debug::dump::dump_stages(name, j, &lowered.text, executable.optimized_ir());
    }
    Ok(CompiledArtifacts { lowered, executable, cache_hit, lower_secs, compile_secs: if cache_hit { 0.0 } else { compile_secs }, persistent })
}
