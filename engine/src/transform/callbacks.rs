//! `pure_callback` and `io_callback`: call a Rust function on the host from traced code
//! and use its results (JAX's `jax.pure_callback`, `jax.experimental.io_callback`).
//!
//! Inside a trace each call stages one `pure_callback`/`io_callback` equation whose
//! `callback` is registered here and in the runtime registry; compiled code fires it
//! through the runtime symbols of `compile::callbacks` (operands out, results back into
//! fresh buffers). Outside a trace the function is called at once.
//!
//! Invariants: **nothing unwinds into compiled code** — a host function that returns
//! `Err` or panics, or whose results do not match the declared `result_shape_dtypes`,
//! becomes the execution's error, naming the callback (`pure_callback `host_sin` failed:
//! ...`). A `pure_callback` has no effects: when its results are unused it is dead code
//! and not called (lowering skips dead equations, `lower::dead_equations`). An `io_callback` has effects:
//! never eliminated, run in program order (`ordered=true` ones cannot be `vmap`ped).
//! Neither is differentiable (JAX's errors; wrap a `pure_callback` in `custom_jvp`).
//!
//! Sharded data: operations on sharded arrays currently run on the mesh's first device
//! with the global value, so a callback under `jit` is called once with the global array,
//! as in JAX. TODO(shard_map): inside `shard_map` it should be called once per shard.

use crate::error::{Error, Result};
use crate::ir::{Atom, CallbackId, Jaxpr, Primitive, ShapeDtypeStruct, ShapedArray, VmapMethod};
use crate::runtime::{callbacks as registry, Buffer, DeviceArray};
use crate::trace::{bind, is_tracing, Array, Operand};
use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::{Arc, Mutex, OnceLock};

/// A host function: receives the operand values (concrete arrays, in order) and returns
/// one array per declared result.
pub type HostFn = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;

impl ShapeDtypeStruct {
    /// The shape and dtype of `x` (JAX's `ShapeDtypeStruct.like`), e.g. to declare that a
    /// callback returns an array like its operand.
    pub fn like(x: &Array) -> ShapeDtypeStruct {
        let a = x.aval();
        ShapeDtypeStruct { shape: a.shape, dtype: a.dtype, weak_type: a.weak_type }
    }
}

/// A registered host function with what is needed to check and name it.
struct Entry {
    f: HostFn,
    /// The function's name (`host_sin`) or `<closure>`.
    name: String,
    /// `pure_callback` or `io_callback`.
    what: &'static str,
    /// The declared results.
    avals: Vec<ShapedArray>,
    /// The user's line that called `pure_callback`/`io_callback`: a failure names it, also
    /// when the callback fires from compiled code (under `jit`, `vmap`).
    site: Option<crate::ir::SourceInfo>,
}

fn entries() -> &'static Mutex<HashMap<CallbackId, Arc<Entry>>> {
    static E: OnceLock<Mutex<HashMap<CallbackId, Arc<Entry>>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(HashMap::new()))
}

fn entry(id: CallbackId) -> Result<Arc<Entry>> {
    entries()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&id)
        .cloned()
        .ok_or_else(|| Error::runtime(format!("unknown host callback {id}")))
}

/// Registers `e` with the runtime: compiled code that fires the returned id runs the host
/// function and leaves its results (or its failure) for the result symbols.
fn register(e: Entry) -> CallbackId {
    let e = Arc::new(e);
    let me: Arc<OnceLock<CallbackId>> = Arc::new(OnceLock::new());
    let (e2, me2) = (e.clone(), me.clone());
    let id = registry::register(Arc::new(move |bufs: &[Buffer]| {
        let id = me2.get().copied().unwrap_or(0);
        let arrays: Vec<Array> = bufs.iter().map(|b| Array::from_buffer(b.clone(), false)).collect();
        let r = crate::compile::callbacks::preserving_failure(|| run_host(&e2, &arrays));
        match r.and_then(|outs| outs.iter().map(|a| a.buffer().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()) {
            Ok(outs) => crate::compile::callbacks::set_results(id, outs),
            Err(err) => crate::compile::callbacks::fail_with(err),
        }
    }));
    let _ = me.set(id);
    entries().lock().unwrap_or_else(|x| x.into_inner()).insert(id, e);
    id
}

/// Registers an engine-internal host function `f` named `name` returning `avals` (the
/// partitioner's collectives inside per-device loop bodies, `partition/loops.rs`); the id
/// a `pure_callback` equation fires. Its failures read `collective `psum` failed: …`.
pub(crate) fn register_internal(name: &str, avals: Vec<ShapedArray>, f: HostFn) -> CallbackId {
    register(Entry { f, name: name.to_string(), what: "collective", avals, site: None })
}

/// The name of a Rust function type as a callback name: the last path segment of a
/// function item (`host_sin`), `<closure>` for a closure.
pub(super) fn callback_name<F>() -> String {
    super::item_name::<F>().unwrap_or_else(|| "<closure>".into())
}

/// Calls the host function of `e` on `args` and checks its results against the declared
/// ones. Errors (`RuntimeError`, naming the callback): the function returned `Err` or
/// panicked (`the callback panicked: MESSAGE`; the panic hook does not report it too,
/// `runtime::quiet_panic`); it returned the wrong number of values, or a value of another shape or dtype
/// (`Incorrect output shape for return value #0: Expected: (3,), Actual: (4,)`).
fn run_host(e: &Entry, args: &[Array]) -> Result<Vec<Array>> {
    let failed = |msg: String| Error::runtime(format!("{} `{}` failed: {msg}", e.what, e.name)).at(e.site.clone());
    let outs = match crate::runtime::quiet_panic::catch_quietly(|| (e.f)(args)) {
        Ok(Ok(outs)) => outs,
        // Already about this callback (a batched callback calling the user's per element).
        Ok(Err(err)) if err.message.starts_with(&format!("{} `{}` failed: ", e.what, e.name)) => return Err(err),
        Ok(Err(err)) => return Err(failed(err.to_string())),
        Err(p) => return Err(failed(format!("the callback panicked: {}", crate::runtime::quiet_panic::panic_message(&*p)))),
    };
    if outs.len() != e.avals.len() {
        return Err(failed(format!(
            "the callback returned {} value{} but result_shape_dtypes declares {}",
            outs.len(),
            if outs.len() == 1 { "" } else { "s" },
            e.avals.len()
        )));
    }
    let mut checked = Vec::with_capacity(outs.len());
    for (i, (o, want)) in outs.into_iter().zip(&e.avals).enumerate() {
        let got = o.aval();
        if got.shape != want.shape {
            return Err(failed(format!(
                "Incorrect output shape for return value #{i}: Expected: {}, Actual: {}",
                crate::lax::py_shape(&want.shape),
                crate::lax::py_shape(&got.shape)
            )));
        }
        if got.dtype != want.dtype {
            return Err(failed(format!(
                "Incorrect output dtype for return value #{i}: Expected: {}, Actual: {}",
                want.dtype.name(),
                got.dtype.name()
            )));
        }
        let b = o.buffer()?;
        checked.push(Array::from_buffer((*b).clone(), want.weak_type));
    }
    Ok(checked)
}

fn parse_vmap_method(m: Option<&str>) -> Result<Option<VmapMethod>> {
    let Some(m) = m else { return Ok(None) };
    VmapMethod::ALL.iter().copied().find(|v| v.name() == m).map(Some).ok_or_else(|| {
        let names: Vec<String> = VmapMethod::ALL.iter().map(|v| format!("'{}'", v.name())).collect();
        Error::value_error(format!("vmap_method must be one of the allowed methods {{{}}}, but got: {m:?}", names.join(", ")))
    })
}

fn call_or_stage(mut e: Entry, prim: impl FnOnce(CallbackId, String, Vec<ShapedArray>) -> Primitive, args: &[Array], loc: &Location<'_>) -> Result<Vec<Array>> {
    e.site = Some(crate::trace::source_info(loc));
    if !is_tracing() {
        return run_host(&e, args);
    }
    let (name, avals) = (e.name.clone(), e.avals.clone());
    let id = register(e);
    bind(prim(id, name, avals), args.iter().cloned().map(Operand::Array).collect(), loc)
}

/// `jax.pure_callback(callback, result_shape_dtypes, *args, vmap_method=...)`: calls the
/// host function `callback` on the values of `args` and returns its results, which must
/// have the shapes and dtypes of `result_shape_dtypes` (one array each). The function must
/// be pure: under `jit` it may be called any number of times, or not at all when its
/// results are unused. `vmap_method` (`"sequential"`, `"sequential_unrolled"`,
/// `"expand_dims"`, `"broadcast_all"`, `"legacy_vectorized"`) says how `vmap` calls it:
/// once per element, or once with a leading batch axis (unbatched operands given a size-1
/// axis, or broadcast). Errors: an unknown `vmap_method` (`ValueError`); under `vmap`
/// without one (`NotImplementedError`); under `grad`/`jvp` (`ValueError`: use
/// `custom_jvp`); the callback's failure or wrong results (`RuntimeError` naming it).
///
/// The host function runs on the thread executing the compiled code (a device worker for
/// functions with effects): it may read its arguments and use eager array operations, but
/// must not wait on work queued behind it (a jitted function with effects would).
#[track_caller]
pub fn pure_callback<F>(callback: F, result_shape_dtypes: &[ShapeDtypeStruct], args: &[Array], vmap_method: Option<&str>) -> Result<Vec<Array>>
where
    F: Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
{
    let loc = Location::caller();
    let vmap_method = parse_vmap_method(vmap_method)?;
    let e = Entry { name: callback_name::<F>(), f: Arc::new(callback), what: "pure_callback", avals: avals_of(result_shape_dtypes), site: None };
    call_or_stage(e, |callback, name, result_avals| Primitive::PureCallback { callback, name, result_avals, vmap_method }, args, loc)
}

/// `jax.experimental.io_callback(callback, result_shape_dtypes, *args, ordered=...)`: as
/// `pure_callback` for a host function with side effects (I/O, random state, logging).
/// It is never eliminated, even when its results are unused; `ordered` calls keep their
/// program order (ours always run in program order). Under `vmap` an unordered callback is
/// called once per element; an ordered one is an error (`Cannot `vmap` ordered IO
/// callback.`). Not differentiable (`IO callbacks do not support JVP.`).
#[track_caller]
pub fn io_callback<F>(callback: F, result_shape_dtypes: &[ShapeDtypeStruct], args: &[Array], ordered: bool) -> Result<Vec<Array>>
where
    F: Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
{
    let loc = Location::caller();
    let e = Entry { name: callback_name::<F>(), f: Arc::new(callback), what: "io_callback", avals: avals_of(result_shape_dtypes), site: None };
    call_or_stage(e, |callback, name, result_avals| Primitive::IoCallback { callback, name, result_avals, ordered }, args, loc)
}

fn avals_of(s: &[ShapeDtypeStruct]) -> Vec<ShapedArray> {
    s.iter().map(|s| s.aval()).collect()
}

/// Eager execution of a staged `pure_callback`/`io_callback` equation (from `eval_jaxpr`,
/// `disable_jit`): waits for the operands, calls the function. `None` for other primitives.
pub(crate) fn eager(p: &Primitive, inputs: &[Arc<DeviceArray>]) -> Result<Option<Vec<Array>>> {
    let id = match p {
        Primitive::PureCallback { callback, .. } | Primitive::IoCallback { callback, .. } => *callback,
        _ => return Ok(None),
    };
    let args = inputs.iter().map(|d| d.wait().map(|b| Array::from_buffer((*b).clone(), d.aval.weak_type))).collect::<Result<Vec<_>>>()?;
    let e = entry(id)?;
    run_host(&e, &args).map(Some)
}

/// JAX's error for differentiating through a host callback, or `None` for other primitives.
pub(crate) fn ad_error(p: &Primitive) -> Option<Error> {
    match p {
        Primitive::PureCallback { .. } => Some(Error::value_error(
            "Pure callbacks do not support JVP. Please use `custom_jvp` to use callbacks while taking gradients.",
        )),
        Primitive::IoCallback { .. } => Some(Error::value_error("IO callbacks do not support JVP.")),
        _ => None,
    }
}

/// `jvp` of a host callback: an error when any operand has a tangent.
pub(crate) fn jvp_check(p: &Primitive, tangents: &[Option<Array>]) -> Result<()> {
    match ad_error(p) {
        Some(e) if tangents.iter().any(|t| t.is_some()) => Err(e),
        _ => Ok(()),
    }
}

/// The variables of `j` that depend on its inputs (not only on constants), so that the
/// reverse pass raises `ad_error` only for callbacks on the differentiated path.
pub(crate) fn primal_deps(j: &Jaxpr) -> HashSet<u32> {
    let mut deps: HashSet<u32> = j.invars.iter().map(|v| v.id).collect();
    for e in &j.eqns {
        if e.inputs.iter().any(|a| matches!(a, Atom::Var(v) if deps.contains(&v.id))) {
            deps.extend(e.outputs.iter().map(|o| o.id));
        }
    }
    deps
}

/// The batching rule: `xs` with `batched` flags (batch axis first) and batch size `b`.
/// Returns the results and whether each is batched.
pub(crate) fn batch(p: &Primitive, xs: &[Array], batched: &[bool], b: usize, loc: &Location<'_>) -> Result<Vec<(Array, bool)>> {
    let ops = |xs: &[Array]| xs.iter().cloned().map(Operand::Array).collect::<Vec<_>>();
    if !batched.iter().any(|&f| f) {
        return Ok(bind(p.clone(), ops(xs), loc)?.into_iter().map(|x| (x, false)).collect());
    }
    let (id, method) = match p {
        Primitive::PureCallback { callback, vmap_method, .. } => match vmap_method {
            Some(m) => (*callback, *m),
            None => {
                return Err(Error::new(
                    crate::error::ErrorKind::NotImplemented,
                    "vmap is only supported for the pure_callback primitive when vmap_method is one of 'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or 'legacy_vectorized'. Got vmap_method=None.",
                ))
            }
        },
        Primitive::IoCallback { ordered: true, .. } => return Err(Error::value_error("Cannot `vmap` ordered IO callback.")),
        Primitive::IoCallback { callback, .. } => (*callback, VmapMethod::Sequential),
        _ => return Err(Error::runtime(format!("internal: `{}` is not a host callback", p.name()))),
    };
    let inner = entry(id)?;
    let avals: Vec<ShapedArray> = inner.avals.iter().map(|a| batched_aval(a, b)).collect();
    let (id, args) = match method {
        VmapMethod::Sequential | VmapMethod::SequentialUnrolled => {
            let flags = batched.to_vec();
            let inner2 = inner.clone();
            let f: HostFn = Arc::new(move |args: &[Array]| sequential(&inner2, args, &flags, b));
            (register(Entry { f, name: inner.name.clone(), what: inner.what, avals: avals.clone(), site: inner.site.clone() }), xs.to_vec())
        }
        VmapMethod::ExpandDims | VmapMethod::LegacyVectorized | VmapMethod::BroadcastAll => {
            let args = xs
                .iter()
                .zip(batched)
                .map(|(x, &f)| {
                    if f {
                        return Ok(x.clone());
                    }
                    let s = x.shape();
                    if method == VmapMethod::BroadcastAll {
                        let mut full = vec![b];
                        full.extend(&s);
                        let dims: Vec<usize> = (1..=s.len()).collect();
                        crate::lax::bind1(Primitive::BroadcastInDim { shape: full, broadcast_dimensions: dims }, vec![Operand::Array(x.clone())])
                    } else {
                        let mut one = vec![1];
                        one.extend(&s);
                        crate::lax::reshape(x, &one)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let f = inner.f.clone();
            (register(Entry { f, name: inner.name.clone(), what: inner.what, avals: avals.clone(), site: inner.site.clone() }), args)
        }
    };
    let prim = match p {
        Primitive::PureCallback { name, vmap_method, .. } => {
            Primitive::PureCallback { callback: id, name: name.clone(), result_avals: avals, vmap_method: *vmap_method }
        }
        Primitive::IoCallback { name, ordered, .. } => Primitive::IoCallback { callback: id, name: name.clone(), result_avals: avals, ordered: *ordered },
        _ => unreachable!("checked above"),
    };
    Ok(bind(prim, ops(&args), loc)?.into_iter().map(|x| (x, true)).collect())
}

fn batched_aval(a: &ShapedArray, b: usize) -> ShapedArray {
    let mut shape = vec![b];
    shape.extend(&a.shape);
    ShapedArray { shape, ..a.clone() }
}

/// `vmap_method="sequential"` on the host: calls `inner` once per batch element (rows of
/// the batched operands, unbatched ones whole) and stacks its results.
fn sequential(inner: &Entry, args: &[Array], batched: &[bool], b: usize) -> Result<Vec<Array>> {
    let bufs = args.iter().map(|a| a.buffer()).collect::<Result<Vec<_>>>()?;
    let mut stacked: Vec<Vec<u8>> = vec![vec![]; inner.avals.len()];
    for i in 0..b {
        let row: Vec<Array> = bufs
            .iter()
            .zip(batched)
            .map(|(buf, &f)| if f { row_of(buf, i, b) } else { Ok(Array::from_buffer((**buf).clone(), false)) })
            .collect::<Result<_>>()?;
        let outs = run_host(inner, &row)?;
        for (s, o) in stacked.iter_mut().zip(&outs) {
            s.extend_from_slice(o.buffer()?.bytes());
        }
    }
    stacked
        .iter()
        .zip(&inner.avals)
        .map(|(bytes, a)| Buffer::from_bytes(&batched_aval(a, b).strong(), bytes).map(|buf| Array::from_buffer(buf, a.weak_type)).map_err(Error::runtime))
        .collect()
}

fn row_of(b: &Buffer, i: usize, size: usize) -> Result<Array> {
    let aval = ShapedArray { shape: b.shape()[1..].to_vec(), ..b.aval().clone() };
    let n = b.bytes().len() / size.max(1);
    Ok(Array::from_buffer(Buffer::from_bytes(&aval, &b.bytes()[i * n..(i + 1) * n]).map_err(Error::runtime)?, false))
}
