//! `jit`: trace once per signature, compile once per lowered module, call fast.
//!
//! The trace cache lives in each `Jitted` (JAX keys it on the function object); its key
//! is the argument signature: pytree structure, leaf avals (shape, dtype, weak type) and
//! static values. Misses are explained when `jax_explain_cache_misses` is on, and every
//! call that missed a cache layer is recorded for `%explain`.
//!
//! The hit path allocates nothing for the lookup: the signature is hashed in place
//! (`signature_hash`, FxHash) and compared with the cached ones field by field
//! (`Signature::matches`); source locations, explain records and magic bookkeeping are
//! only built on a miss or while a magic listens.

use super::explain::{self, Event};
use super::pipeline::{self, CompiledArtifacts, StageOptions};
use super::stages::{Compiled, Lowered, Traced};
use crate::config;
use crate::error::{Error, Result};
use crate::ir::{ClosedJaxpr, ShapedArray, SourceInfo};
use crate::compile::ArgBuf;
use crate::runtime::{dispatch, Buffer, DeviceArray, MemoryKind};
use crate::sharding::OutPlace;
use smallvec::SmallVec;
use crate::trace::pytree::{flatten_value, ArgLeaf, Args, Flat, Pytree, StaticValue, TreeDef};
use crate::tree::ShapeTree;
use crate::trace::{self, source_info, Array};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// What a traced function may return: a pytree, or `Result` of one (so `?` works).
pub trait TraceOutput {
    /// The pytree type of the output.
    type Out: Pytree;
    fn into_result(self) -> Result<Self::Out>;
}
impl<R: Pytree> TraceOutput for R {
    type Out = R;
    fn into_result(self) -> Result<R> {
        Ok(self)
    }
}
impl<R: Pytree> TraceOutput for Result<R> {
    type Out = R;
    fn into_result(self) -> Result<R> {
        self
    }
}

/// The cache key of a trace: everything about the arguments that changes the jaxpr.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Signature {
    pub treedef: TreeDef,
    pub avals: Vec<ShapedArray>,
    pub statics: Vec<String>,
    #[doc(hidden)]
    pub static_hashes: Vec<u64>,
}

/// The hash of `flat`'s signature (equal to hashing the `Signature` it would make),
/// computed without building one.
fn signature_hash(flat: &Flat) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = FxHasher::default();
    flat.treedef.hash(&mut h);
    flat.leaves.len().hash(&mut h);
    for l in &flat.leaves {
        leaf_aval(l).hash(&mut h);
    }
    for st in &flat.statics {
        st.hash.hash(&mut h);
    }
    h.finish()
}

fn leaf_aval(l: &ArgLeaf) -> &ShapedArray {
    match l {
        ArgLeaf::Value(a) => a.aval_ref(),
        ArgLeaf::Spec(s) => s,
    }
}

/// A small multiplicative hasher (rustc's FxHash) for the per-call cache key: the key is
/// a few words, where SipHash's setup dominates.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Signature {
    /// Whether `flat` has this signature (compared in place, nothing allocated).
    fn matches(&self, flat: &Flat) -> bool {
        self.treedef == flat.treedef
            && self.avals.len() == flat.leaves.len()
            && self.avals.iter().zip(&flat.leaves).all(|(a, l)| a == leaf_aval(l))
            && self.static_hashes.len() == flat.statics.len()
            && self.static_hashes.iter().zip(&flat.statics).all(|(h, st)| *h == st.hash)
            && self.statics.iter().zip(&flat.statics).all(|(r, st)| *r == st.repr)
    }

    fn of(flat: &Flat) -> Signature {
        Signature {
            treedef: flat.treedef.clone(),
            avals: flat.leaves.iter().map(|l| l.aval()).collect(),
            statics: flat.statics.iter().map(|s| s.repr.clone()).collect(),
            static_hashes: flat.statics.iter().map(|s| s.hash).collect(),
        }
    }
}

/// One traced signature: the jaxpr and, once compiled, the executable.
pub struct CacheEntry {
    pub jaxpr: ClosedJaxpr,
    pub out_statics: Vec<StaticValue>,
    /// Structure of the output (the result is rebuilt from it).
    pub out_tree: TreeDef,
    /// Per flat argument: whether it is donated (`donate_argnums`).
    pub donated: Vec<bool>,
    pub trace_secs: f64,
    pub compiled: OnceLock<CompiledArtifacts>,
    /// Whether calls with ready inputs may run synchronously on the calling thread
    /// (`sync_ok`).
    pub sync: bool,
    /// Whether its running time is bounded by its shapes (`bounded_ok`): then calls run
    /// on the calling thread while its latest run was short (`run_here`).
    pub bounded: bool,
    /// Whether the jaxpr (or a nested one) has effects (`Jaxpr::has_effects`).
    pub has_effects: bool,
    /// Whether the jaxpr (or a nested one) holds a `shard_map`: such calls run equation by
    /// equation (`Jitted::call_shard_map`).
    pub has_shard_map: bool,
    /// `jax_default_matmul_precision` when traced: part of the cache key, and in effect
    /// while this entry is lowered.
    pub matmul_precision: Option<crate::ir::DotPrecision>,
    /// Op metadata scope (`set_xla_metadata`) open when traced: part of the cache key, as
    /// in JAX (its equations carry it).
    pub xla_metadata: Option<Arc<str>>,
    /// Memory kind per flat argument (`in_shardings` with a memory kind) and per output
    /// (`out_shardings` with a memory kind, else a `device_put` to a memory kind that makes
    /// it); empty: all `device`. Lowered as `mhlo.memory_kind`; outputs are made there.
    pub in_kinds: Vec<crate::runtime::MemoryKind>,
    pub out_kinds: Vec<crate::runtime::MemoryKind>,
}

impl CacheEntry {
    /// The stage options of this entry at `opt_level` (donation, memory kinds).
    pub(crate) fn stage_options(&self, opt_level: Option<u8>) -> StageOptions {
        StageOptions { donated: self.donated.clone(), opt_level, in_memory_kinds: self.in_kinds.clone(), out_memory_kinds: self.out_kinds.clone() }
    }
}

/// Whether a computation may run on the calling thread when its inputs are ready: it has
/// no effects (those are ordered on the device worker) and no `while`/`scan` loop (whose
/// running time is unbounded, so the wait for it stays interruptible on the worker).
pub(crate) fn sync_ok(j: &crate::ir::Jaxpr) -> bool {
    fn loops(j: &crate::ir::Jaxpr) -> bool {
        j.eqns.iter().any(|e| {
            matches!(e.primitive, crate::ir::Primitive::While { .. } | crate::ir::Primitive::Scan { .. })
                || e.primitive.sub_jaxprs().into_iter().any(loops)
        })
    }
    !j.has_effects() && !loops(j)
}

/// Whether a computation's running time is bounded by its shapes alone: no effects, and
/// its loops (at least one) are all `scan`s (a fixed trip count; `fori_loop` with static
/// bounds is one), no `while`. Such a computation may run on the calling thread once a
/// timed run showed it short ([`run_here`]): a handoff to the device worker and back cost
/// tens of µs on this machine kind (a KVM guest), more than a short scan runs, and a run
/// that is short stays short, so a wait for it never needs an interrupt.
pub(crate) fn bounded_ok(j: &crate::ir::Jaxpr) -> bool {
    fn has_while(j: &crate::ir::Jaxpr) -> bool {
        j.eqns.iter().any(|e| matches!(e.primitive, crate::ir::Primitive::While { .. }) || e.primitive.sub_jaxprs().into_iter().any(has_while))
    }
    !j.has_effects() && !sync_ok(j) && !has_while(j)
}

/// The longest fastest run of a [`bounded_ok`] executable that runs on the calling thread.
pub(crate) const SYNC_LOOP_MAX: std::time::Duration = std::time::Duration::from_millis(1);

/// Whether a call may run on the calling thread: `sync` (`sync_ok`), or `bounded`
/// (`bounded_ok`) and `exe`'s fastest run took under [`SYNC_LOOP_MAX`] (the fastest, not
/// the latest: a run preempted on a loaded machine does not send it back to the worker). A bounded
/// executable's runs are timed from its first call (which goes to the worker).
pub(crate) fn run_here(sync: bool, bounded: bool, exe: &pipeline::ExecutableRef) -> bool {
    if sync {
        return true;
    }
    // Timed also when it goes to the worker: the wait for its result spins as long as it
    // last ran (`dispatch::expect_run`, in `run` and `run_donating`).
    exe.time_runs();
    bounded && exe.best_run().is_some_and(|t| t < SYNC_LOOP_MAX)
}

/// A jitted function's `in_shardings` (per argument position) and `out_shardings` (per
/// output leaf).
#[derive(Clone, Default)]
pub(crate) struct JitShardings {
    ins: Option<Vec<Option<crate::sharding::PutTarget>>>,
    outs: Option<Vec<crate::sharding::PutTarget>>,
}

pub(crate) struct JitInner<A, R> {
    f: Arc<dyn Fn(A) -> Result<R>>,
    pub(crate) name: String,
    pub(crate) site: SourceInfo,
    id: u64,
    donate_argnums: Vec<usize>,
    static_argnums: Vec<usize>,
    /// `compiler_options` (JAX's `jit(f, compiler_options={...})`), checked at the first compile.
    compiler_options: Vec<(String, String)>,
    /// `in_shardings` / `out_shardings` (global-view sharding): where each argument is
    /// placed before the call and each output after it.
    shardings: JitShardings,
    /// Trace cache: signature hash (`signature_hash`) → the signatures with that hash.
    cache: Mutex<HashMap<u64, Vec<(Signature, Arc<CacheEntry>)>>>,
    /// Every key traced so far, for explaining misses: the signature and the tracing
    /// context (the matmul precision and op-metadata scope in effect).
    seen: Mutex<Vec<(Signature, TracingContext)>>,
    /// The API that traces it, as its warnings name it: `jit`, or `make_jaxpr` (which
    /// traces through a `jit` of the function).
    api: &'static str,
}

/// The parts of a trace cache key that are not the arguments (JAX's tracing context):
/// `jax_default_matmul_precision` and the `set_xla_metadata` scope when traced.
#[derive(Clone, Debug, PartialEq)]
struct TracingContext {
    matmul_precision: Option<crate::ir::DotPrecision>,
    xla_metadata: Option<Arc<str>>,
}

impl TracingContext {
    fn current() -> Self {
        TracingContext {
            matmul_precision: crate::lax::precision::default_matmul_precision(),
            xla_metadata: crate::trace::metadata::current_metadata(),
        }
    }

    /// The differences from `before`, one `  * ...` line each (empty when equal).
    fn differences(&self, before: &TracingContext) -> String {
        let precision = |p: &Option<crate::ir::DotPrecision>| p.as_ref().map_or("None".to_string(), |p| p.short());
        let metadata = |m: &Option<Arc<str>>| m.as_deref().map_or("None".to_string(), |m| format!("{{{m}}}"));
        let mut s = String::new();
        if self.matmul_precision != before.matmul_precision {
            s.push_str(&format!(
                "\n  * jax_default_matmul_precision: now {} and before {}",
                precision(&self.matmul_precision),
                precision(&before.matmul_precision)
            ));
        }
        if self.xla_metadata != before.xla_metadata {
            s.push_str(&format!(
                "\n  * set_xla_metadata scope: now {} and before {}",
                metadata(&self.xla_metadata),
                metadata(&before.xla_metadata)
            ));
        }
        s
    }
}

/// A jit-compiled function (JAX's `jax.jit(f)`). Cloning shares the caches.
pub struct Jitted<A, R> {
    pub(crate) inner: Arc<JitInner<A, R>>,
    _p: PhantomData<fn(A) -> R>,
}

impl<A, R> Clone for Jitted<A, R> {
    fn clone(&self) -> Self {
        Jitted { inner: self.inner.clone(), _p: PhantomData }
    }
}

fn definition_sites() -> &'static Mutex<HashMap<SourceInfo, u64>> {
    static S: OnceLock<Mutex<HashMap<SourceInfo, u64>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The name JAX gives an anonymous function (a Python `lambda`), ours for a closure.
pub const LAMBDA: &str = "<lambda>";

fn default_name<F>() -> String {
    super::item_name::<F>().unwrap_or_else(|| LAMBDA.to_string())
}

/// Wraps `f` for tracing and compilation (JAX's `jax.jit`). `f` takes one pytree
/// argument (several arguments are a tuple) and returns a pytree or `Result` of one.
/// The function's name (`jit(<name>)` in logs and `%explain`, `@jit_<name>` in the lowered
/// module) is the item's name for `fn` items and JAX's name of an anonymous function,
/// `<lambda>`, for closures (module `@jit__lambda`, as JAX's); `%explain` and the
/// tracing-cache-miss explanation tell closures apart by their definition site (`cell 3,
/// line 1`). Set another name with `.with_name`.
#[track_caller]
pub fn jit<A, O, F>(f: F) -> Jitted<A, O::Out>
where
    A: Pytree,
    O: TraceOutput,
    F: Fn(A) -> O + 'static,
{
    let site = source_info(Location::caller());
    let id = next_jit_id();
    Jitted {
        inner: Arc::new(JitInner {
            f: Arc::new(move |a| f(a).into_result()),
            name: default_name::<F>(),
            site,
            id,
            donate_argnums: Vec::new(),
            static_argnums: Vec::new(),
            compiler_options: Vec::new(),
            shardings: JitShardings::default(),
            cache: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            api: "jit",
        }),
        _p: PhantomData,
    }
}

/// A fresh id for a jitted function.
fn next_jit_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl<A: Pytree, R: Pytree> Jitted<A, R> {
    /// This function's settings changed by `change`. Unshared (right after `jit`) it is
    /// changed in place; a function shared by clones becomes a new jitted function of the
    /// same Rust function with its own id and empty caches (as JAX's `jit(f, ...)` with
    /// other options is another function), and the clones keep theirs.
    fn with_inner(self, change: impl FnOnce(JitInner<A, R>) -> JitInner<A, R>) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| JitInner {
            f: shared.f.clone(),
            name: shared.name.clone(),
            site: shared.site.clone(),
            id: next_jit_id(),
            donate_argnums: shared.donate_argnums.clone(),
            static_argnums: shared.static_argnums.clone(),
            compiler_options: shared.compiler_options.clone(),
            shardings: shared.shardings.clone(),
            cache: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            api: shared.api,
        });
        Jitted { inner: Arc::new(change(inner)), _p: PhantomData }
    }

    /// The same function under another name (`module @jit_<name>`).
    pub fn with_name(self, name: &str) -> Self {
        self.with_inner(|inner| JitInner { name: name.to_string(), ..inner })
    }

    /// Donates the arguments at positions `argnums` (JAX's `donate_argnums`; positions in
    /// the argument tuple, and 0 for a function of one non-tuple argument). Each leaf of a
    /// donated argument whose shape and dtype match an output not yet aliased is marked
    /// `tf.aliasing_output` in the lowered module; at a call its buffer becomes that
    /// output's buffer and the argument is deleted (reading it afterwards is
    /// `RuntimeError: Array has been deleted with shape=float32[2,3].`). Donated leaves
    /// without such an output stay usable and are reported once per compilation
    /// (`UserWarning: Some donated buffers were not usable: float32[3].`).
    /// On a function shared by clones it makes a new jitted function (its own id and
    /// caches); the clones keep theirs.
    pub fn donate_argnums(self, argnums: &[usize]) -> Self {
        self.with_inner(|inner| JitInner { donate_argnums: argnums.to_vec(), ..inner })
    }

    /// Compiler options for this function (JAX's `jax.jit(f, compiler_options={...})`),
    /// e.g. `.compiler_options(&[("optimization_level", "O3")])`: the keys and values of
    /// `Lowered::compile_with` (`opt_level` 0–3, `optimization_level` O0–O3). They
    /// override `JAXREPL_FLAGS` and are part of the executable-cache key. As in JAX an
    /// unknown option is an error at the first call (`No such compile option: 'name'`).
    /// On a function shared by clones it makes a new jitted function (its own id and
    /// caches); the clones keep theirs.
    pub fn compiler_options(self, options: &[(&str, &str)]) -> Self {
        let compiler_options = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.with_inner(|inner| JitInner { compiler_options, ..inner })
    }

    /// JAX's `jit(f, in_shardings=…)`: argument `i` (a position in the argument tuple, 0
    /// for a function of one argument) is placed as `shardings[i]` before each call (a
    /// `NamedSharding`, a `PartitionSpec` on the mesh set by `set_mesh`, or a `Device`;
    /// `None` leaves it where it is); every leaf of that argument gets it. Arrays already
    /// laid out that way are not moved, and uncommitted ones are placed; a committed
    /// argument laid out otherwise is JAX's `ValueError` ("Sharding passed to jit does not
    /// match the sharding on the respective arg", `device_put` or `reshard` it first),
    /// except that any replicated layout may move to another replicated one (a
    /// single-device array onto `P()`, or to another device), as in JAX.
    /// Errors at the call: those, a memory kind that differs on a committed argument
    /// (JAX's text), and `device_put`'s.
    /// On a function shared by clones it makes a new jitted function (its own id and
    /// caches); the clones keep theirs.
    pub fn in_shardings<T: Into<crate::sharding::PutTarget>>(self, shardings: Vec<Option<T>>) -> Self {
        let ins = shardings.into_iter().map(|s| s.map(Into::into)).collect();
        self.with_inner(|inner| JitInner { shardings: JitShardings { ins: Some(ins), ..inner.shardings.clone() }, ..inner })
    }

    /// JAX's `jit(f, out_shardings=…)`: output leaf `i` is laid out as `shardings[i]` (one
    /// entry applies to every output). The values are the single-device result's.
    /// On a function shared by clones it makes a new jitted function (its own id and
    /// caches); the clones keep theirs.
    pub fn out_shardings<T: Into<crate::sharding::PutTarget>>(self, shardings: Vec<T>) -> Self {
        let outs = shardings.into_iter().map(Into::into).collect();
        self.with_inner(|inner| JitInner { shardings: JitShardings { outs: Some(outs), ..inner.shardings.clone() }, ..inner })
    }

    /// Places the flat argument leaves per `in_shardings`.
    fn place_inputs(&self, flat: &mut Flat) -> Result<()> {
        let Some(ins) = &self.inner.shardings.ins else { return Ok(()) };
        let ranges = flat.treedef.arg_leaf_ranges();
        if ins.len() != ranges.len() {
            // JAX's pjit text for an in_shardings tuple of the wrong length.
            return Err(Error::value_error(format!(
                "jit in_shardings specification must be a tree prefix of the positional arguments tuple. In particular, \
                 jit in_shardings must either be a Sharding, a PartitionSpec, or a tuple of length equal to the number of \
                 positional arguments. But jit in_shardings is the wrong length: got a tuple or list of length {} for an \
                 args tuple of length {}.",
                ins.len(),
                ranges.len()
            )));
        }
        for (i, target) in ins.iter().enumerate() {
            let (Some(t), Some(r)) = (target, ranges.get(i)) else { continue };
            for leaf in &mut flat.leaves[r.clone()] {
                if let ArgLeaf::Value(a) = leaf {
                    if !a.is_tracer() && !crate::sharding::placed_as(a, t) {
                        crate::sharding::check_committed_arg(a, t)?;
                        // device_put's errors name the jit argument, as JAX's do.
                        *a = crate::sharding::device_put(a, t.clone()).map_err(|mut e| {
                            e.message = e.message.replacen("One of device_put args", &format!("One of pjit arguments with pytree key path args[{i}]"), 1);
                            e
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The memory kinds of the flat arguments (`in_shardings`) and of the outputs
    /// (`out_shardings`, else `device_put` equations of `jaxpr`); each empty when all are
    /// `device`.
    fn memory_kinds(&self, def: &TreeDef, jaxpr: &crate::ir::Jaxpr) -> (Vec<MemoryKind>, Vec<MemoryKind>) {
        let mut ins = vec![MemoryKind::Device; def.num_leaves()];
        if let Some(targets) = &self.inner.shardings.ins {
            for (t, r) in targets.iter().zip(def.arg_leaf_ranges()) {
                if let Some(k) = t.as_ref().and_then(crate::sharding::PutTarget::memory_kind) {
                    ins[r].iter_mut().for_each(|x| *x = k);
                }
            }
        }
        let mut outs = crate::runtime::memory_kind::jaxpr_out_kinds(jaxpr);
        // Arguments placed in pinned host memory by `in_shardings`: results the memory-space
        // rule puts there are made there (and the lowered text marks them).
        if ins.contains(&MemoryKind::PinnedHost) {
            let host: Vec<bool> = ins.iter().map(|k| *k == MemoryKind::PinnedHost).collect();
            if let Ok(spaces) = crate::sharding_types::out_spaces(jaxpr, &host) {
                outs.resize(jaxpr.outvars.len(), MemoryKind::Device);
                for (o, h) in outs.iter_mut().zip(spaces) {
                    if h && !o.is_host() {
                        *o = MemoryKind::PinnedHost;
                    }
                }
            }
        }
        if let Some(targets) = &self.inner.shardings.outs {
            outs.resize(jaxpr.outvars.len(), MemoryKind::Device);
            for (i, o) in outs.iter_mut().enumerate() {
                if let Some(t) = targets.get(i).or(if targets.len() == 1 { targets.first() } else { None }) {
                    *o = t.memory_kind().unwrap_or(MemoryKind::Device);
                }
            }
        }
        let none_host = |v: Vec<MemoryKind>| if v.iter().any(|k| k.is_host()) { v } else { vec![] };
        (none_host(ins), none_host(outs))
    }

    /// `place` with outputs made in `kinds`, committed when every `out_shardings` target
    /// is a single-device sharding of the device they are computed on.
    fn out_place_in_kinds(&self, mut place: OutPlace, kinds: &[MemoryKind]) -> OutPlace {
        let device = place.placement.device;
        if let Some(targets) = &self.inner.shardings.outs {
            let here = |t: &crate::sharding::PutTarget| match t {
                crate::sharding::PutTarget::Sharding(crate::sharding::Sharding::Single(s)) => s.device.id == device,
                crate::sharding::PutTarget::Device(d) => d.id == device,
                _ => false,
            };
            if targets.iter().all(here) {
                place.placement.committed = true;
            }
        }
        place.with_kinds(kinds)
    }

    /// Lays the outputs out per `out_shardings`; an output without one that `jaxpr`
    /// computes by a `with_sharding_constraint` gets the constraint's sharding (JAX's
    /// "constrain the output" recipe; on unsharded arguments the call runs on one device, so
    /// the layout is applied to its result).
    fn place_outputs(&self, jaxpr: &ClosedJaxpr, outs: Vec<Array>) -> Result<Vec<Array>> {
        let targets = self.inner.shardings.outs.as_ref();
        outs.into_iter()
            .enumerate()
            .map(|(i, o)| {
                let asked = targets.and_then(|t| t.get(i).or(if t.len() == 1 { t.first() } else { None })).cloned();
                let target = asked.or_else(|| constrained_output(jaxpr, i).map(crate::sharding::PutTarget::from));
                match target {
                    Some(t) if !crate::sharding::placed_as(&o, &t) => crate::sharding::device_put(&o, t),
                    _ => Ok(o),
                }
            })
            .collect()
    }

    /// The LLVM optimisation level this function compiles at (its `compiler_options`,
    /// else `JAXREPL_FLAGS`, else 2). Errors: an unknown option or bad value.
    pub(crate) fn resolved_opt_level(&self) -> Result<u8> {
        let opts: Vec<(&str, &str)> = self.inner.compiler_options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        super::stages::parse_compiler_options(&opts)
    }

    /// Marks the arguments at positions `argnums` static (JAX's `static_argnums`;
    /// positions in the argument tuple, 0 for a function of one non-tuple argument).
    /// A plain Rust scalar (`f64`, `f32`, `i32`, `i64`, `bool`) passed at such a position
    /// for an `Array` parameter is not traced: the function sees a concrete weakly typed
    /// 0-d array (`n.item::<i32>()?` works inside the trace) and the value is part of the
    /// cache key, so a new value retraces (explained as JAX does: `* at input path [0][1],
    /// now ... Static(val=5) and before ... Static(val=2), so the pytree node metadata does
    /// not match`). Parameters typed as Rust values (`usize`, `i32`, `f64`, `bool`,
    /// `String`, `Static<T>`) are static whether listed or not (Rust's types say so).
    /// Errors at call time (`ValueError`): a position past the last argument (`Jitted
    /// function has static_argnums=(5,), but only accepts 2 positional arguments.`), or
    /// a position holding an `Array` (not hashable, as in JAX).
    /// On a function shared by clones it makes a new jitted function (its own id and
    /// caches); the clones keep theirs.
    pub fn static_argnums(self, argnums: &[usize]) -> Self {
        self.with_inner(|inner| JitInner { static_argnums: argnums.to_vec(), ..inner })
    }

    /// Flattens `args`, applying `static_argnums`.
    pub(crate) fn flatten(&self, args: impl Args<A>) -> Result<Flat> {
        let mut flat = Flat::default();
        args.flatten_args(&mut flat);
        apply_static_argnums(&self.inner.static_argnums, &mut flat)?;
        Ok(flat)
    }

    /// The positions given to `static_argnums`.
    pub fn static_argnums_list(&self) -> &[usize] {
        &self.inner.static_argnums
    }

    /// Per flat leaf of arguments of structure `def`: whether it is donated.
    fn donated_flags(&self, def: &TreeDef) -> Vec<bool> {
        let mut d = vec![false; def.num_leaves()];
        let ranges = def.arg_leaf_ranges();
        for &i in &self.inner.donate_argnums {
            if let Some(r) = ranges.get(i) {
                d[r.clone()].iter_mut().for_each(|x| *x = true);
            }
        }
        d
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The name `%explain` shows: a closure's (`<lambda>`) with its definition site, so two
    /// closures are told apart: `<lambda> (defined at cell 3, line 1)`.
    fn explain_name(&self) -> String {
        if self.inner.name == LAMBDA {
            format!("{LAMBDA} (defined at {})", self.inner.site.line_label())
        } else {
            self.inner.name.clone()
        }
    }

    /// Calls the function: trace on a new signature, compile on a new lowered module,
    /// then run: on this thread when every input is ready and the computation has no
    /// effects and no `while`/`scan` (`sync_ok`; results are ready arrays), else
    /// dispatched to the device worker (results are futures; reading them waits).
    /// Errors: tracing errors with the user's line, compile errors, `KeyboardInterrupt`.
    #[track_caller]
    pub fn call(&self, args: impl Args<A>) -> Result<R> {
        let loc = Location::caller();
        // An error that names no user line (placing the arguments, a callback's failure
        // from compiled code) names the call's, as JAX's traceback does.
        let r = self.call_at(args, loc).map_err(|e| e.at(Some(source_info(loc))));
        if let Err(e) = &r {
            // A magic inspecting this call shows why it failed (`%jaxpr f.call(&x)` on a
            // function whose trace fails).
            crate::magic::note_error(e);
        }
        r
    }

    /// `call` with the caller's location given.
    fn call_at(&self, args: impl Args<A>, loc: &'static Location<'static>) -> Result<R> {
        let mut flat = self.flatten(args)?;
        if !trace::is_tracing() {
            self.place_inputs(&mut flat)?;
        }
        if trace::is_tracing() || config::disable_jit() || flat.leaves.iter().any(|l| matches!(l, ArgLeaf::Value(a) if a.is_tracer())) {
            // Nested jit: inline into the enclosing trace. Under `jax_disable_jit` the
            // function runs eagerly on the concrete arguments.
            let a = self.rebuild_args(&flat)?;
            return (self.inner.f)(a);
        }
        if flat.leaves.iter().any(|l| matches!(l, ArgLeaf::Spec(_))) {
            return Err(Error::type_error(
                "cannot call a jitted function with ShapeDtypeStruct arguments; use .trace(...) or .lower(...) for specs",
            ));
        }
        crate::runtime::interrupt::check()?;
        let _span = crate::profiler::span("jit", || format!("PjitFunction({})", self.inner.name));
        let (entry, traced_now) = self.lookup_or_trace(&flat, loc)?;
        if crate::magic::capturing() {
            crate::magic::note_typed(typed_jaxpr(&entry.jaxpr, &flat));
        }
        if entry.has_shard_map {
            for e in &entry.jaxpr.jaxpr.eqns {
                if let crate::ir::Primitive::ShardMap(sm) = &e.primitive {
                    let ins = flat.leaves.iter().filter_map(|l| match l {
                        ArgLeaf::Value(a) => a.device(),
                        ArgLeaf::Spec(_) => None,
                    });
                    crate::transform::shard_map::check_arg_devices(&sm.mesh, ins, &self.inner.name, |i| format!("args[{i}]"))?;
                }
            }
            // shard_map (issue 6): the partitioner inlines its body (a per-device program
            // cut at its collectives into compiled segments, `partition.rs`); a program it
            // cannot take runs equation by equation, the body per device.
            if let Some(outs) = self.try_partition_shard_map(&entry, &flat, traced_now, loc)? {
                let outs = self.place_outputs(&entry.jaxpr, outs)?;
                return crate::trace::pytree::unflatten_like::<R>(&entry.out_tree, outs, entry.out_statics.clone());
            }
            crate::magic::note_call(&self.inner.name, &entry);
            crate::magic::note_partitioned(None);
            return self.call_shard_map(&entry, &flat);
        }
        let place = crate::sharding::out_place(
            flat.leaves.iter().filter_map(|l| match l {
                ArgLeaf::Value(a) => a.device(),
                ArgLeaf::Spec(_) => None,
            }),
            &self.inner.name,
            |i| format!("args[{i}]"),
        )?;
        if place.mesh().is_none() && entry.has_effects {
            crate::sharding_rules::inspect_unsharded(&entry.jaxpr.jaxpr, place.placement.device);
        }
        // Results computed from pinned-host arguments are made there (JAX's memory-space
        // rule, `sharding_types::call_out_kinds`); no allocation unless some argument is.
        let host_kinds = if flat.leaves.iter().any(|l| matches!(l, ArgLeaf::Value(a) if a.device().is_some_and(|d| d.memory_kind == MemoryKind::PinnedHost))) {
            let ins: Vec<&DeviceArray> = flat.leaves.iter().filter_map(|l| match l {
                ArgLeaf::Value(a) => a.device().map(|d| &**d),
                ArgLeaf::Spec(_) => None,
            }).collect();
            Some(crate::sharding_types::call_out_kinds(&entry.jaxpr.jaxpr, &ins, &entry.out_kinds).map_err(|e| e.at(Some(source_info(loc))))?)
        } else {
            None
        };
        let out_kinds: &[MemoryKind] = host_kinds.as_deref().unwrap_or(&entry.out_kinds);
        let mut partitioned = None;
        let place = if let Some(mesh) = place.mesh().cloned() {
            let ins: Vec<Arc<DeviceArray>> = flat.leaves.iter().filter_map(|l| match l {
                ArgLeaf::Value(a) => a.device().cloned(),
                ArgLeaf::Spec(_) => None,
            }).collect();
            let place = place.for_jaxpr(&entry.jaxpr, &ins).map_err(|e| e.at(Some(source_info(loc))))?;
            if !entry.donated.iter().any(|d| *d) {
                // The partitioner: one per-device program with collectives (`partition.rs`);
                // the whole program is then never compiled.
                let want = crate::partition::wanted(self.inner.shardings.outs.as_ref(), &entry.jaxpr.jaxpr.out_avals(), &mesh);
                let opts = StageOptions { donated: vec![], opt_level: Some(self.resolved_opt_level()?), ..Default::default() };
                let t0 = Instant::now();
                partitioned = {
                    let _precision = crate::lax::precision::with_default_matmul_precision(entry.matmul_precision)?;
                    crate::partition::try_run(&self.inner.name, &entry.jaxpr, &ins, &mesh, &want, &opts, out_kinds)?
                };
                if partitioned.is_some() {
                    if crate::magic::capturing() {
                        // %lower / %compile --stage read the whole program too.
                        self.compiled(&entry)?;
                    }
                    self.note_partitioned_call(&entry, &ins, &mesh, &want, &opts, traced_now, loc, t0);
                }
            }
            place
        } else {
            place
        };
        let art = if partitioned.is_some() {
            None
        } else {
            let was_compiled = entry.compiled.get().is_some();
            let t0 = (!was_compiled).then(Instant::now);
            let art = self.compiled(&entry)?;
            crate::magic::note_call(&self.inner.name, &entry);
            crate::magic::note_partitioned(None);
            if traced_now || !was_compiled {
                explain::record(Event {
                    function: self.explain_name(),
                    call_site: source_info(loc),
                    trace_miss: traced_now,
                    trace_secs: if traced_now { entry.trace_secs } else { 0.0 },
                    executable_hit: art.cache_hit,
                    compile_secs: t0.map_or(0.0, |t| t.elapsed().as_secs_f64()),
                    reason: None,
                    persistent: art.persistent.clone(),
                    partition: vec![],
                });
            }
            Some(art)
        };
        // Outputs in a host memory kind (`out_shardings` with a memory kind, `device_put` to
        // a memory kind) are made there; outputs whose `out_shardings` is this device are
        // committed to it, so `place_outputs` has nothing to move.
        let place = if out_kinds.is_empty() { place } else { self.out_place_in_kinds(place, out_kinds) };
        if crate::magic::capturing() && self.inner.shardings.outs.is_some() {
            // `%lower` shows the results laid out as `out_shardings` asks (as `Jitted::lower`).
            let leaves: Vec<Option<Arc<DeviceArray>>> = flat.leaves.iter().map(|l| match l { ArgLeaf::Value(a) => a.device().cloned(), ArgLeaf::Spec(_) => None }).collect();
            let a = crate::sharding_rules::with_out_shardings(crate::sharding_rules::annotations(&entry.jaxpr, &leaves), &entry.jaxpr, self.inner.shardings.outs.as_ref());
            crate::magic::note_lowered(a.zip(entry.compiled.get()).map(|(a, c)| crate::sharding_rules::annotate_text(&c.lowered.text, &a)));
        }
        let outs = match (partitioned, art) {
            (Some(outs), _) => outs,
            (None, Some(art)) if run_here(entry.sync, entry.bounded, &art.executable) => match run_sync(&art.executable, &entry.jaxpr, flat.leaves.iter().map(|l| match l {
                ArgLeaf::Value(a) => a.device().expect("concrete"),
                ArgLeaf::Spec(_) => unreachable!(),
            }), &place)? {
                Some(outs) => outs,
                None => self.run_async(&art.executable, &entry, &flat, &place)?,
            },
            (None, Some(art)) => self.run_async(&art.executable, &entry, &flat, &place)?,
            (None, None) => return Err(Error::runtime("internal: jit call neither partitioned nor compiled")),
        };
        if crate::debug::nans::enabled() {
            let inputs: Vec<Array> = flat.leaves.iter().filter_map(|l| match l {
                ArgLeaf::Value(a) => Some(a.clone()),
                ArgLeaf::Spec(_) => None,
            }).collect();
            crate::debug::nans::check_jit(&self.inner.name, &entry.jaxpr, &inputs, &outs).map_err(|e| e.at(Some(source_info(loc))))?;
        }
        if !entry.sync && entry.has_effects {
            for o in &outs {
                o.block_until_ready()?;
            }
            dispatch::barrier()?;
        }
        let outs = self.place_outputs(&entry.jaxpr, outs)?;
        crate::trace::pytree::unflatten_like::<R>(&entry.out_tree, outs, entry.out_statics.clone())
    }

    /// Runs a jaxpr holding `shard_map` equations partitioned on the mesh of its first
    /// `shard_map` (every argument unsharded or sharded on that mesh, no donation);
    /// `Ok(None)`: the equation-by-equation path.
    fn try_partition_shard_map(&self, entry: &Arc<CacheEntry>, flat: &Flat, traced_now: bool, loc: &'static Location<'static>) -> Result<Option<Vec<Array>>> {
        let Some(mesh) = entry.jaxpr.jaxpr.eqns.iter().find_map(|e| match &e.primitive {
            crate::ir::Primitive::ShardMap(sm) => Some(sm.mesh.clone()),
            _ => None,
        }) else {
            return Ok(None);
        };
        if entry.donated.iter().any(|d| *d) || entry.has_effects {
            return Ok(None);
        }
        let ins: Vec<Arc<DeviceArray>> = flat.leaves.iter().filter_map(|l| match l {
            ArgLeaf::Value(a) => a.device().cloned(),
            ArgLeaf::Spec(_) => None,
        }).collect();
        if ins.iter().any(|d| d.sharded_info().is_some_and(|sh| sh.sharding.mesh != mesh)) {
            return Ok(None);
        }
        let want = crate::partition::wanted(self.inner.shardings.outs.as_ref(), &entry.jaxpr.jaxpr.out_avals(), &mesh);
        let opts = StageOptions { donated: vec![], opt_level: Some(self.resolved_opt_level()?), ..Default::default() };
        let t0 = Instant::now();
        let outs = {
            let _precision = crate::lax::precision::with_default_matmul_precision(entry.matmul_precision)?;
            crate::partition::try_run(&self.inner.name, &entry.jaxpr, &ins, &mesh, &want, &opts, &entry.out_kinds)?
        };
        if outs.is_some() {
            self.note_partitioned_call(entry, &ins, &mesh, &want, &opts, traced_now, loc, t0);
        }
        Ok(outs)
    }

    /// Records a call that ran partitioned: for magics (the call and its per-device program
    /// texts, `partition::describe_call`) and, when it was traced now, for `%explain` (a
    /// trace miss whose segments compiled since `t0`).
    #[allow(clippy::too_many_arguments)]
    fn note_partitioned_call(
        &self,
        entry: &Arc<CacheEntry>,
        ins: &[Arc<DeviceArray>],
        mesh: &crate::sharding::Mesh,
        want: &[Option<crate::sharding_rules::Dims>],
        opts: &StageOptions,
        traced_now: bool,
        loc: &'static Location<'static>,
        t0: Instant,
    ) {
        crate::magic::note_call(&self.inner.name, entry);
        if crate::magic::capturing() {
            // `%lower`'s global module marks results and arguments with their memory kinds
            // (`out_shardings` / `in_shardings` with a memory kind, sharded or not), as the
            // whole program's lowering does; the plan (cached without them) is the same.
            let with_kinds = StageOptions { in_memory_kinds: entry.in_kinds.clone(), out_memory_kinds: entry.out_kinds.clone(), ..opts.clone() };
            crate::magic::note_partitioned(crate::partition::describe_call(&self.inner.name, &entry.jaxpr, ins, mesh, want, &with_kinds));
        }
        if traced_now {
            explain::record(Event {
                function: self.explain_name(),
                call_site: source_info(loc),
                trace_miss: true,
                trace_secs: entry.trace_secs,
                executable_hit: false,
                compile_secs: t0.elapsed().as_secs_f64(),
                reason: None,
                persistent: None,
                partition: crate::partition::notes(&entry.jaxpr, ins, mesh, want, opts),
            });
        }
    }

    /// Runs a jaxpr holding `shard_map` equations with `eval_jaxpr`: each other equation
    /// compiled once per signature, each `shard_map` body run per device.
    fn call_shard_map(&self, entry: &CacheEntry, flat: &Flat) -> Result<R> {
        let consts: Vec<Array> = entry.jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
        let args: Vec<Array> = flat.leaves.iter().filter_map(|l| match l {
            ArgLeaf::Value(a) => Some(a.clone()),
            ArgLeaf::Spec(_) => None,
        }).collect();
        let outs = super::interp::eval_jaxpr(&entry.jaxpr.jaxpr, &consts, &args)?;
        crate::trace::pytree::unflatten_like::<R>(&entry.out_tree, outs, entry.out_statics.clone())
    }

    fn run_async(&self, exe: &pipeline::ExecutableRef, entry: &CacheEntry, flat: &Flat, place: &OutPlace) -> Result<Vec<Array>> {
        let inputs: Vec<Arc<DeviceArray>> = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => a.device().cloned().expect("concrete"),
                ArgLeaf::Spec(_) => unreachable!(),
            })
            .collect();
        run_donating(exe, &entry.jaxpr, inputs, &entry.donated, false, place)
    }

    fn rebuild_args(&self, flat: &Flat) -> Result<A> {
        let leaves: Vec<Array> = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => Ok(a.clone()),
                ArgLeaf::Spec(_) => Err(Error::type_error("ShapeDtypeStruct arguments inside a trace")),
            })
            .collect::<Result<_>>()?;
        crate::trace::pytree::unflatten_like::<A>(&flat.treedef, leaves, flat.statics.clone())
    }

    pub(crate) fn compiled<'e>(&self, entry: &'e CacheEntry) -> Result<&'e CompiledArtifacts> {
        if let Some(c) = entry.compiled.get() {
            return Ok(c);
        }
        let opts = entry.stage_options(Some(self.resolved_opt_level()?));
        let c = {
            let _precision = crate::lax::precision::with_default_matmul_precision(entry.matmul_precision)?;
            pipeline::compile_jaxpr(&entry.jaxpr, &self.inner.name, &opts)?
        };
        warn_unusable_donations(&entry.jaxpr, &entry.donated);
        let _ = entry.compiled.set(c);
        Ok(entry.compiled.get().expect("just set"))
    }

    /// Finds the trace for `flat`'s signature or traces now; the bool says whether it traced.
    /// The lookup hashes the signature in place (`signature_hash`) and compares it with
    /// the cached ones without allocating.
    pub(crate) fn lookup_or_trace(&self, flat: &Flat, loc: &'static Location<'static>) -> Result<(Arc<CacheEntry>, bool)> {
        let h = signature_hash(flat);
        {
            let cache = self.inner.cache.lock().unwrap_or_else(|e| e.into_inner());
            let mp = crate::lax::precision::default_matmul_precision();
            if let Some(e) = cache.get(&h).and_then(|v| v.iter().find(|(s, e)| s.matches(flat) && e.matmul_precision == mp && crate::trace::metadata::is_current(&e.xla_metadata))) {
                return Ok((e.1.clone(), false));
            }
        }
        let sig = Signature::of(flat);
        let call_site = source_info(loc);
        let reason = self.explain_miss(&sig, &call_site);
        if config::explain_cache_misses() {
            eprintln!("{reason}");
        }
        explain::set_pending_reason(reason);
        let t0 = Instant::now();
        let span = crate::profiler::span("trace", || format!("trace jit({})", self.inner.name));
        let (jaxpr, out_statics, out_tree) = self.trace_flat(flat, &sig)?;
        drop(span);
        let sync = sync_ok(&jaxpr.jaxpr);
        let bounded = bounded_ok(&jaxpr.jaxpr);
        let has_effects = jaxpr.jaxpr.has_effects();
        let has_shard_map = crate::transform::shard_map::contains_shard_map(&jaxpr.jaxpr);
        let (in_kinds, out_kinds) = self.memory_kinds(&flat.treedef, &jaxpr.jaxpr);
        let entry = Arc::new(CacheEntry {
            jaxpr,
            out_statics,
            out_tree,
            donated: self.donated_flags(&flat.treedef),
            trace_secs: t0.elapsed().as_secs_f64(),
            compiled: OnceLock::new(),
            sync,
            bounded,
            has_effects,
            has_shard_map,
            matmul_precision: crate::lax::precision::default_matmul_precision(),
            xla_metadata: crate::trace::metadata::current_metadata(),
            in_kinds,
            out_kinds,
        });
        if config::log_compiles() {
            eprintln!("Finished tracing {} for jit in {:.9} sec", self.inner.name, entry.trace_secs);
        }
        if let Some(w) = crate::debug::unrolled_loop_warning(&format!("{}({})", self.inner.api, self.inner.name), &entry.jaxpr.jaxpr) {
            warn(w);
        }
        self.inner.cache.lock().unwrap_or_else(|e| e.into_inner()).entry(h).or_default().push((sig.clone(), entry.clone()));
        self.inner.seen.lock().unwrap_or_else(|e| e.into_inner()).push((sig, TracingContext::current()));
        Ok((entry, true))
    }

    fn trace_flat(&self, flat: &Flat, sig: &Signature) -> Result<(ClosedJaxpr, Vec<StaticValue>, TreeDef)> {
        let names: Vec<String> = (0..sig.avals.len()).map(|i| format!("args[{i}]")).collect();
        let site = &self.inner.site;
        let desc = format!("{} at {}", self.inner.name, site.line_label());
        let (id, tracers) = trace::push_trace(&desc, &sig.avals, names);
        // `typeof_` of a tracer shows the sharding its arguments' layouts give it.
        let types: Vec<Option<crate::sharding_types::ValueType>> =
            flat.leaves.iter().map(|l| match l { ArgLeaf::Value(a) => a.device().and_then(|d| crate::sharding_types::ValueType::of_device(d)), ArgLeaf::Spec(_) => None }).collect();
        if types.len() == sig.avals.len() && types.iter().any(|t| t.is_some()) {
            trace::set_arg_types(id, types);
        }
        let liveness = trace::trace_liveness(id);
        let a = match crate::trace::pytree::unflatten_like::<A>(&flat.treedef, tracers, flat.statics.clone()) {
            Ok(a) => a,
            Err(e) => {
                trace::abandon_trace(id);
                return Err(e);
            }
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.inner.f)(a)));
        let r = match r {
            Ok(r) => r,
            Err(p) => {
                trace::abandon_trace(id);
                std::panic::resume_unwind(p);
            }
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                // Prefer the first error the trace recorded (it has the user's line).
                let recorded = trace::pop_trace(id, &[]).err();
                return Err(recorded.unwrap_or(e));
            }
        };
        let out = flatten_value(&r);
        let outs: Vec<Array> = out
            .leaves
            .into_iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => a,
                ArgLeaf::Spec(s) => crate::numpy::zeros(&s.shape, s.dtype),
            })
            .collect();
        let (jaxpr, consts) = trace::pop_trace(id, &outs)?;
        drop((outs, r));
        if config::check_tracer_leaks() {
            let alive = liveness.map_or(0, |w| w.strong_count());
            if alive > 0 {
                return Err(Error::new(
                    crate::error::ErrorKind::UnexpectedTracer,
                    format!(
                        "Leaked trace of jit({}) (defined at {}): {alive} of its tracers are still alive after tracing. \
                         The function stored a traced value outside itself (a Vec, a static, a captured RefCell); \
                         return it instead. Using it later raises UnexpectedTracerError.",
                        self.inner.name, site.line_label()
                    ),
                ));
            }
        }
        let consts = consts.iter().map(|a| a.buffer()).collect::<Result<Vec<Arc<Buffer>>>>()?;
        Ok((ClosedJaxpr { jaxpr, consts, in_types: None }, out.statics, out.treedef))
    }

    fn explain_miss(&self, sig: &Signature, call_site: &SourceInfo) -> String {
        let at = format!("TRACING CACHE MISS at {call_site}:");
        let seen = self.inner.seen.lock().unwrap_or_else(|e| e.into_inner());
        let site = &self.inner.site;
        if seen.is_empty() {
            let mut s = format!(
                "{at}\n  never seen function:\n    {} id={} defined at {}",
                self.inner.name, self.inner.id, site.line_label()
            );
            let mut sites = definition_sites().lock().unwrap_or_else(|e| e.into_inner());
            let n = sites.entry(site.clone()).or_insert(0);
            if *n > 0 {
                s.push_str(
                    "\n  but seen another function defined on the same line; maybe the function is\n  being re-defined repeatedly, preventing caching?",
                );
            }
            *n += 1;
            return s;
        }
        let mut s = format!(
            "{at}\n  for {} defined at {}\n  all previously seen cache keys differ. For the closest previous key:",
            self.inner.name, site.line_label()
        );
        let now = TracingContext::current();
        let (closest, context) = seen
            .iter()
            .min_by_key(|(k, c)| {
                (!k.treedef.same_structure(&sig.treedef)) as usize * 100
                    + k.avals.iter().zip(&sig.avals).filter(|(a, b)| a != b).count() * 2
                    + usize::from(*c != now)
            })
            .map(|(k, c)| (k, c.clone()))
            .expect("non-empty");
        let changed_context = now.differences(&context);
        if !changed_context.is_empty() && closest.treedef == sig.treedef && closest.avals == sig.avals && closest.statics == sig.statics {
            // Same arguments: the tracing context changed (JAX's "different tracing context").
            s.push_str("\n  different tracing context, e.g. due to config or context manager:");
            s.push_str(&changed_context);
        } else if !closest.treedef.same_structure(&sig.treedef) {
            s.push_str(&format!("\n  different input pytree:\n  * now {} and before {}", sig.treedef, closest.treedef));
        } else if closest.avals != sig.avals {
            s.push_str("\n  different input types:");
            for (i, (now, before)) in sig.avals.iter().zip(&closest.avals).enumerate() {
                if now != before {
                    if now.shape == before.shape && now.dtype == before.dtype {
                        s.push_str(&format!(
                            "\n  * at args[{i}], now {}{{weak_type={}}} and before {}{{weak_type={}}}",
                            now.short(),
                            py_bool(now.weak_type),
                            before.short(),
                            py_bool(before.weak_type)
                        ));
                    } else {
                        s.push_str(&format!("\n  * at args[{i}], now {} and before {}", now.short(), before.short()));
                    }
                }
            }
        } else if let Some((path, now, before)) = static_arg_difference(&sig.treedef, &closest.treedef) {
            // JAX 0.10.2 reports a changed static argument as pytree node metadata.
            s.push_str(&format!(
                "\n  different input pytree:\n  * at input path {path}, now <class 'jax._src.tree_util.Static'> with pytree metadata Static(val={now}) \
                 and before <class 'jax._src.tree_util.Static'> with pytree metadata Static(val={before}), so the pytree node metadata does not match"
            ));
        } else {
            s.push_str(&format!(
                "\n  different static arguments:\n  * now {} and before {}",
                sig.statics.join(", "),
                closest.statics.join(", ")
            ));
        }
        s
    }

    /// Traces for `args` (arrays or `ShapeDtypeStruct` specs) without compiling (JAX's
    /// `jit(f).trace(...)`). Errors: tracing errors.
    #[track_caller]
    pub fn trace(&self, args: impl Args<A>) -> Result<Traced<A, R>> {
        let mut flat = self.flatten(args)?;
        // Arguments placed as `in_shardings` says, as a call places them: the trace (and
        // its lowered text's Shardy annotations) is the one the call runs.
        self.place_inputs(&mut flat)?;
        let (entry, _) = self.lookup_or_trace(&flat, Location::caller())?;
        let mut t = Traced::new(self.clone(), entry.clone(), Signature::of(&flat));
        if entry.has_shard_map || flat.leaves.iter().any(|l| matches!(l, ArgLeaf::Value(a) if a.device().is_some_and(|d| d.sharded_info().is_some()))) {
            let leaves: Vec<Option<Arc<DeviceArray>>> =
                flat.leaves.iter().map(|l| match l { ArgLeaf::Value(a) => a.device().cloned(), ArgLeaf::Spec(_) => None }).collect();
            t.shardings = crate::sharding_rules::annotations(&entry.jaxpr, &leaves);
        }
        // `out_shardings` lay the results out (also on a mesh no argument is on).
        t.shardings = crate::sharding_rules::with_out_shardings(t.shardings.take(), &entry.jaxpr, self.inner.shardings.outs.as_ref());
        t.typed = typed_jaxpr(&entry.jaxpr, &flat);
        Ok(t)
    }

    /// `jit(f).lower(args)`: trace then lower.
    #[track_caller]
    pub fn lower(&self, args: impl Args<A>) -> Result<Lowered<A, R>> {
        self.trace(args)?.lower()
    }

    /// `jit(f).eval_shape(args)`: the output's structure with a `ShapeDtypeStruct` per
    /// leaf, without compiling (arguments may be arrays or `ShapeDtypeStruct` specs).
    /// Errors: tracing errors.
    #[track_caller]
    pub fn eval_shape(&self, args: impl Args<A>) -> Result<ShapeTree> {
        Ok(self.trace(args)?.out_info())
    }

    /// Number of traces in this function's cache.
    pub fn cache_size(&self) -> usize {
        self.inner.cache.lock().unwrap_or_else(|e| e.into_inner()).values().map(Vec::len).sum()
    }

    /// Compiles an entry (shared with `Lowered::compile`).
    pub(crate) fn compile_entry(&self, entry: &CacheEntry) -> Result<Compiled<A, R>> {
        let art = self.compiled(entry)?;
        Ok(Compiled::new(
            art.lowered.clone(),
            art.executable.clone(),
            entry.jaxpr.clone(),
            entry.out_statics.clone(),
            entry.out_tree.clone(),
            entry.donated.clone(),
            self.inner.static_argnums.clone(),
        )
        .with_opt_level(self.resolved_opt_level()?))
    }
}

/// The first top-level argument that is static in both structures with different values:
/// (JAX's input path `[0][i]`, the value now, the value before).
fn static_arg_difference(now: &TreeDef, before: &TreeDef) -> Option<(String, String, String)> {
    let (a, b) = match (now, before) {
        (TreeDef::Tuple(a), TreeDef::Tuple(b)) => (a.clone(), b.clone()),
        (a, b) => (vec![a.clone()], vec![b.clone()]),
    };
    a.iter().zip(&b).enumerate().find_map(|(i, (x, y))| match (x, y) {
        (TreeDef::Static(x), TreeDef::Static(y)) if x != y => Some((format!("[0][{i}]"), x.repr.clone(), y.repr.clone())),
        _ => None,
    })
}

/// Applies `static_argnums` to flattened arguments: each listed position must exist and
/// hold no `Array` leaves except plain Rust scalars, which become static values (removed
/// from the leaves, their value put in the structure). Errors: `ValueError` as JAX's.
pub(crate) fn apply_static_argnums(argnums: &[usize], flat: &mut Flat) -> Result<()> {
    if argnums.is_empty() {
        return Ok(());
    }
    let tuple = matches!(flat.treedef, TreeDef::Tuple(_));
    let mut children = match &flat.treedef {
        TreeDef::Tuple(c) => c.clone(),
        d => vec![d.clone()],
    };
    if argnums.iter().any(|&i| i >= children.len()) {
        return Err(Error::value_error(format!(
            "Jitted function has static_argnums={}, but only accepts {} positional arguments.",
            py_tuple_usize(argnums),
            children.len()
        )));
    }
    let ranges = flat.treedef.arg_leaf_ranges();
    let mut dropped = vec![false; flat.leaves.len()];
    for &p in argnums {
        let r = ranges[p].clone();
        if r.is_empty() {
            continue; // already static: a Rust value, `Static<T>`, or a struct of static fields
        }
        let scalar = flat.scalars.iter().find(|(i, _)| *i == r.start).map(|(_, v)| *v);
        match (scalar, &children[p]) {
            (Some(v), TreeDef::Leaf) if r.len() == 1 => {
                let sv = StaticValue::scalar(v);
                flat.statics.push(sv.clone());
                children[p] = TreeDef::Static(sv);
                dropped[r.start] = true;
            }
            _ => {
                let types: Vec<String> = flat.leaves[r].iter().map(|l| l.aval().short()).collect();
                return Err(Error::value_error(format!(
                    "Non-hashable static arguments are not supported. The argument at static_argnums position {p} holds Array leaves ({}), and an Array is not hashable. Pass a Rust value (usize, i32, f64, bool, String) or Static<T> there, or remove {p} from static_argnums.",
                    types.join(", ")
                )));
            }
        }
    }
    let mut kept = Vec::new();
    let mut scalars = Vec::new();
    for (i, l) in std::mem::take(&mut flat.leaves).into_iter().enumerate() {
        if dropped[i] {
            continue;
        }
        if let Some((_, v)) = flat.scalars.iter().find(|(j, _)| *j == i) {
            scalars.push((kept.len(), *v));
        }
        kept.push(l);
    }
    flat.leaves = kept;
    flat.scalars = scalars;
    flat.treedef = if tuple { TreeDef::Tuple(children) } else { children.pop().expect("one argument") };
    Ok(())
}

fn py_tuple_usize(v: &[usize]) -> String {
    crate::ir::pretty::py_tuple(v)
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Dispatches an executable on device inputs; outputs carry the jaxpr's out avals
/// (weak types included).
/// Outputs are placed by `place` (`sharding::out_place`); the work runs on that device's
/// worker.
pub(crate) fn run(exe: &pipeline::ExecutableRef, jaxpr: &ClosedJaxpr, inputs: Vec<Arc<DeviceArray>>, place: &OutPlace) -> Result<Vec<Array>> {
    let outs: Vec<Arc<DeviceArray>> = jaxpr.jaxpr.out_avals().into_iter().enumerate().map(|(i, a)| place.out(i, a, None)).collect();
    let exe = exe.clone();
    dispatch::expect_run(exe.last_run());
    dispatch::submit_on(place.placement.device, outs.clone(), move || {
        let bufs = inputs.iter().map(|d| d.wait()).collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Buffer> = bufs.iter().map(|b| b.as_ref()).collect();
        exe.execute(&refs)
    });
    Ok(outs.into_iter().map(Array::from_device).collect())
}

/// For each flat argument: the output whose buffer it donates to, by the lowering's rule
/// (the first output not yet aliased with the same shape and dtype), or `None`.
pub(crate) fn donation_aliases(in_avals: &[ShapedArray], out_avals: &[ShapedArray], donated: &[bool]) -> Vec<Option<usize>> {
    let mut taken = vec![false; out_avals.len()];
    in_avals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if !donated.get(i).copied().unwrap_or(false) {
                return None;
            }
            let k = out_avals.iter().enumerate().position(|(k, o)| !taken[k] && o.shape == a.shape && o.dtype == a.dtype)?;
            taken[k] = true;
            Some(k)
        })
        .collect()
}

fn warnings_log() -> &'static Mutex<Vec<String>> {
    static W: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Vec::new()))
}

/// Prints `UserWarning: <msg>` on stderr (as Python's `warnings.warn`) and records it.
/// As under Python's default warning filter, a text is printed once per process (in a
/// session: in the cell that first caused it; a later re-trace or re-compile that warns
/// the same is not shown again); every issue is recorded ([`warnings_issued`]).
pub(crate) fn warn(msg: String) {
    let mut log = warnings_log().lock().unwrap_or_else(|e| e.into_inner());
    if !log.contains(&msg) {
        eprintln!("UserWarning: {msg}");
        warnings_shown_log().lock().unwrap_or_else(|e| e.into_inner()).push(msg.clone());
    }
    log.push(msg);
}

fn warnings_shown_log() -> &'static Mutex<Vec<String>> {
    static W: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(Vec::new()))
}

/// The warnings printed so far in this process (each text once), oldest first (for tests).
#[doc(hidden)]
pub fn warnings_shown() -> Vec<String> {
    warnings_shown_log().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The warnings issued so far in this process, oldest first (for tests).
#[doc(hidden)]
pub fn warnings_issued() -> Vec<String> {
    warnings_log().lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// JAX's warning for donated arguments that no output can reuse (once per compilation).
fn warn_unusable_donations(j: &ClosedJaxpr, donated: &[bool]) {
    let ins = j.jaxpr.in_avals();
    let aliases = donation_aliases(&ins, &j.jaxpr.out_avals(), donated);
    let unusable: Vec<String> = ins
        .iter()
        .enumerate()
        .filter(|(i, _)| donated.get(*i) == Some(&true) && aliases[*i].is_none())
        .map(|(_, a)| a.long_strong())
        .collect();
    if !unusable.is_empty() {
        warn(format!("Some donated buffers were not usable: {}.", unusable.join(", ")));
    }
}

/// Runs `exe` now on the calling thread if every input is ready, donating as
/// `run_donating` does; `Ok(None)` (nothing done) when an input is still pending or
/// failed, so the caller dispatches to the worker instead. Outputs are ready arrays with
/// the jaxpr's out avals.
pub(crate) fn run_sync<'a>(
    exe: &pipeline::ExecutableRef,
    jaxpr: &ClosedJaxpr,
    inputs: impl Iterator<Item = &'a Arc<DeviceArray>> + Clone,
    place: &OutPlace,
) -> Result<Option<Vec<Array>>> {
    let mut bufs: SmallVec<[Option<Arc<Buffer>>; 8]> = SmallVec::new();
    for d in inputs.clone() {
        match d.try_buffer() {
            Some(b) => bufs.push(Some(b)),
            None => return Ok(None),
        }
    }
    let donated = exe.donated_args();
    let mut owned: SmallVec<[Option<Buffer>; 8]> = SmallVec::new();
    if donated.iter().any(|d| *d) {
        owned.resize_with(bufs.len(), || None);
        for (i, d) in inputs.enumerate() {
            if donated.get(i) == Some(&true) {
                d.delete();
            }
        }
        for i in 0..bufs.len() {
            if donated.get(i) == Some(&true) {
                // Every reference but ours went with the deleted array, unless the buffer
                // is shared (passed twice, a jaxpr constant): then it is only read.
                match Arc::try_unwrap(bufs[i].take().expect("present")) {
                    Ok(own) => owned[i] = Some(own),
                    Err(shared) => bufs[i] = Some(shared),
                }
            }
        }
    }
    let mut args: SmallVec<[ArgBuf<'_>; 8]> = SmallVec::with_capacity(bufs.len());
    for (i, b) in bufs.iter().enumerate() {
        args.push(match owned.get_mut(i).and_then(Option::take) {
            Some(own) => ArgBuf::Donated(own),
            None => ArgBuf::Borrowed(b.as_ref().expect("present")),
        });
    }
    let outs = exe.execute_args_small(&mut args)?;
    Ok(Some(
        outs.into_iter()
            .zip(&jaxpr.jaxpr.outvars)
            .enumerate()
            .map(|(i, (b, v))| Array::from_device(place.out(i, v.aval().clone(), Some(Arc::new(b)))))
            .collect(),
    ))
}

/// `run` with donation: each donated input that aliases an output
/// (`Executable::donated_args`) is taken now (waiting for it if pending) and marked deleted, and its buffer becomes that
/// output, computed in place (`Executable::execute_args`). A donated buffer still shared
/// elsewhere (a jaxpr constant, say) is only read (the output gets a copy), but the
/// argument is deleted all the same. With `sync` and every input ready, runs on the
/// calling thread (`run_sync`).
pub(crate) fn run_donating(
    exe: &pipeline::ExecutableRef,
    jaxpr: &ClosedJaxpr,
    inputs: Vec<Arc<DeviceArray>>,
    donated: &[bool],
    sync: bool,
    place: &OutPlace,
) -> Result<Vec<Array>> {
    let _ = donated; // the executable's aliases already reflect the donated flags
    if sync {
        if let Some(outs) = run_sync(exe, jaxpr, inputs.iter(), place)? {
            return Ok(outs);
        }
    }
    let aliases: Vec<bool> = exe.donated_args().to_vec();
    if !aliases.iter().any(|d| *d) {
        return run(exe, jaxpr, inputs, place);
    }
    let mut taken: Vec<Option<Arc<Buffer>>> = vec![None; inputs.len()];
    for (i, k) in aliases.iter().enumerate() {
        if *k && taken[i].is_none() {
            let b = inputs[i].wait()?;
            for (j, d) in inputs.iter().enumerate() {
                if Arc::ptr_eq(d, &inputs[i]) {
                    taken[j] = Some(b.clone());
                }
            }
        }
    }
    for (i, k) in aliases.iter().enumerate() {
        if *k {
            inputs[i].delete();
        }
    }
    let outs: Vec<Arc<DeviceArray>> = jaxpr.jaxpr.out_avals().into_iter().enumerate().map(|(i, a)| place.out(i, a, None)).collect();
    let exe = exe.clone();
    dispatch::expect_run(exe.last_run());
    dispatch::submit_on(place.placement.device, outs.clone(), move || {
        let mut bufs: Vec<Option<Arc<Buffer>>> = Vec::with_capacity(inputs.len());
        for (d, t) in inputs.iter().zip(&mut taken) {
            bufs.push(Some(match t.take() {
                None => d.wait()?,
                Some(b) => b,
            }));
        }
        let mut owned: Vec<Option<Buffer>> = (0..bufs.len()).map(|_| None).collect();
        for i in 0..bufs.len() {
            if aliases[i] {
                match Arc::try_unwrap(bufs[i].take().expect("present")) {
                    Ok(own) => owned[i] = Some(own),
                    Err(shared) => bufs[i] = Some(shared),
                }
            }
        }
        let mut args: Vec<ArgBuf<'_>> = bufs
            .iter()
            .zip(owned)
            .map(|(b, o)| match o {
                Some(own) => ArgBuf::Donated(own),
                None => ArgBuf::Borrowed(b.as_ref().expect("present")),
            })
            .collect();
        exe.execute_args(&mut args)
    });
    Ok(outs.into_iter().map(Array::from_device).collect())
}

/// The sharding of the `with_sharding_constraint` that computes output `i` of `jaxpr`
/// directly, if one does.
fn constrained_output(jaxpr: &ClosedJaxpr, i: usize) -> Option<crate::sharding::NamedSharding> {
    let crate::ir::Atom::Var(v) = jaxpr.jaxpr.outvars.get(i)? else { return None };
    jaxpr.jaxpr.eqns.iter().rev().find(|e| e.outputs.iter().any(|o| o.id == v.id)).and_then(|e| match &e.primitive {
        crate::ir::Primitive::ShardingConstraint { sharding } => Some(sharding.clone()),
        _ => None,
    })
}

/// `jax.eval_shape(f, args)`: the structure of `f`'s output with a `ShapeDtypeStruct` per
/// leaf, found by tracing (nothing is compiled or run). `args` may be arrays or
/// `ShapeDtypeStruct` specs. Errors: tracing errors.
#[track_caller]
pub fn eval_shape<A, O, F>(f: F, args: impl Args<A>) -> Result<ShapeTree>
where
    A: Pytree,
    O: TraceOutput,
    F: Fn(A) -> O + 'static,
{
    jit(f).eval_shape(args)
}

/// `jaxpr` with its arguments' types (`ClosedJaxpr::in_types`) when some argument in
/// `flat` is sharded over an explicit mesh or in pinned host memory; `None` otherwise.
fn typed_jaxpr(jaxpr: &ClosedJaxpr, flat: &Flat) -> Option<ClosedJaxpr> {
    let typed = |d: &DeviceArray| d.sharded_info().is_some() || d.memory_kind == crate::runtime::MemoryKind::PinnedHost;
    if !flat.leaves.iter().any(|l| matches!(l, ArgLeaf::Value(a) if a.device().is_some_and(|d| typed(d)))) {
        return None;
    }
    let leaves: Vec<Option<Arc<DeviceArray>>> =
        flat.leaves.iter().map(|l| match l { ArgLeaf::Value(a) => a.device().cloned(), ArgLeaf::Spec(_) => None }).collect();
    let in_types = crate::sharding_types::in_types(&jaxpr.jaxpr, &leaves)?;
    Some(ClosedJaxpr { in_types: Some(in_types), ..jaxpr.clone() })
}

/// `jax.make_jaxpr(f)(args)`: the closed jaxpr of `f` at `args`.
#[track_caller]
pub fn make_jaxpr<A, O, F>(f: F, args: impl Args<A>) -> Result<ClosedJaxpr>
where
    A: Pytree,
    O: TraceOutput,
    F: Fn(A) -> O + 'static,
{
    let j = jit(f).with_inner(|inner| JitInner { api: "make_jaxpr", ..inner });
    let t = j.trace(args)?;
    Ok(t.jaxpr().clone())
}
