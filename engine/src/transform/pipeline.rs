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
                jaxpr: Box::new(ClosedJaxpr { jaxpr: canonicalize(&jaxpr.jaxpr), consts: jaxpr.consts.clone() }),
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
    let c = ClosedJaxpr { jaxpr: canonicalize(&j.jaxpr), consts: j.consts.clone() };
    let mut donated = opts.donated.clone();
    donated.resize(c.jaxpr.invars.len(), false);
    lower::lower_jaxpr(&c, name, &LowerOptions { donated })
}

/// Compiles a lowered module, through the executable cache.
pub fn compile_lowered(m: &LoweredModule, opts: &StageOptions) -> Result<(ExecutableRef, bool)> {
    let opt_level = opts.opt_level.unwrap_or(2);
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
    if let Some(e) = exe_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok((e.clone(), true));
    }
    // Compile on a helper thread so that an interrupt stops the wait at once; an
    // interrupted compile still finishes in the background and fills the cache.
    let (tx, rx) = std::sync::mpsc::channel();
    let module = m.clone();
    std::thread::Builder::new()
        .name("jax-compile".into())
        .spawn(move || {
            let r = compile::compile(&module, &CompileOptions { opt_level }).map(Arc::new);
            if let Ok(exe) = &r {
                COMPILES.fetch_add(1, Ordering::Relaxed);
                exe_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, exe.clone());
            }
            let _ = tx.send(r);
        })
        .map_err(|e| crate::error::Error::compile(format!("cannot start a compile thread: {e}")))?;
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(10)) {
            Ok(r) => return r.map(|exe| (exe, false)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
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
    let lowered = Arc::new(lower_closed(j, name, opts)?);
    let lower_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let (executable, cache_hit) = compile_lowered(&lowered, opts)?;
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
        eprintln!("Finished MLIR compilation of jit({name}) in {compile_secs:.9} sec");
    }
    if !cache_hit {
        crate::debug::dump::dump_stages(name, j, &lowered.text, executable.optimized_ir());
    }
    Ok(CompiledArtifacts { lowered, executable, cache_hit, lower_secs, compile_secs: if cache_hit { 0.0 } else { compile_secs } })
}
