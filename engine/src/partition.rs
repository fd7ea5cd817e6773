//! The partitioner's first step: a jitted program whose every equation is **shard-local**
//! under the propagated shardings runs as one per-shard program on every device of the
//! mesh at once, with no gather (JAX's SPMD partitioning for the case that needs no
//! collectives).
//!
//! Shard-local here means: no constants, no effects, no donation, every equation an
//! elementwise primitive (`sin`, `add`, `select_n`, `convert_element_type`, …; 0-d
//! operands are scalars every shard reads whole), and every non-0-d argument, intermediate
//! and result of one shape, all sharded alike (so each device's block of the result depends
//! only on its blocks of the arguments). The per-shard program is the same jaxpr with each
//! non-0-d type divided into its block shape, compiled once (executable cache) and run on
//! each device's worker on that device's shard buffers; the results are sharded arrays
//! made of the per-device buffers (whole values are assembled only if read).
//! Everything else takes the gather path (`sharding.rs`); `Compiled::as_text` names the path.
//! Programs that need collectives (reductions and contractions over sharded dims, reshards)
//! wait for the collectives runtime (ARCHITECTURE.md, "Partitioner plan").

use crate::error::Result;
use crate::ir::{Atom, ClosedJaxpr, Jaxpr, Primitive, ShapedArray};
use crate::runtime::dispatch::{self, DeviceArray, Placement};
use crate::runtime::{Buffer, MemoryKind};
use crate::sharding::{BlockIndex, NamedSharding};
use crate::sharding_rules::Dims;
use crate::trace::Array;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Whether `p` computes each output element from the same-position input elements only.
fn elementwise(p: &Primitive) -> bool {
    use Primitive::*;
    matches!(
        p,
        Neg | Exp | Log | Sin | Cos | Tanh | Sqrt | Abs | Not | Add | AddAny | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or | Eq | Ne | Lt
            | Le | Gt | Ge | SelectN | ConvertElementType { .. } | StopGradient | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic
            | ErfInv | NextAfter | Sign | Floor | Ceil | Round { .. } | IsFinite | Log1p | Expm1 | Logistic | Erf | IntegerPow { .. }
            | Xor | ReducePrecision { .. } | DevicePut { .. }
    )
}

/// The common shape and dims of a shard-local program on inputs sharded as `ins`, or
/// `None` when it is not shard-local (see the module docs).
pub(crate) fn shard_local(j: &ClosedJaxpr, ins: &[Dims]) -> Option<(Vec<usize>, Dims)> {
    let jx = &j.jaxpr;
    if !jx.constvars.is_empty() || jx.has_effects() || jx.eqns.is_empty() {
        return None;
    }
    let mut common: Option<(Vec<usize>, Dims)> = None;
    let mut check = |aval: &ShapedArray, dims: Option<&Dims>| -> bool {
        if aval.ndim() == 0 {
            return true;
        }
        match (&common, dims) {
            (None, Some(d)) => {
                common = Some((aval.shape.clone(), d.clone()));
                true
            }
            (None, None) => false,
            (Some((s, d)), dd) => *s == aval.shape && dd.is_none_or(|x| x == d),
        }
    };
    for (v, d) in jx.invars.iter().zip(ins) {
        if !check(&v.aval, Some(d)) {
            return None;
        }
    }
    for e in &jx.eqns {
        if !elementwise(&e.primitive) || e.outputs.iter().any(|o| !check(&o.aval, None)) {
            return None;
        }
    }
    for o in &jx.outvars {
        if !check(o.aval(), None) || matches!(o, Atom::Lit(_)) {
            return None;
        }
    }
    let (shape, dims) = common?;
    if dims.iter().all(|e| e.is_empty()) {
        return None; // replicated everywhere: nothing to split
    }
    Some((shape, dims))
}

/// `j` with every non-0-d type replaced by the block shape `block`.
fn per_shard(j: &ClosedJaxpr, block: &[usize]) -> ClosedJaxpr {
    let fix = |a: &mut ShapedArray| {
        if a.ndim() > 0 {
            a.shape = block.to_vec();
        }
    };
    let mut jx: Jaxpr = j.jaxpr.clone();
    for v in jx.invars.iter_mut() {
        fix(&mut v.aval);
    }
    for e in jx.eqns.iter_mut() {
        for a in e.inputs.iter_mut() {
            if let Atom::Var(v) = a {
                fix(&mut v.aval);
            }
        }
        for o in e.outputs.iter_mut() {
            fix(&mut o.aval);
        }
    }
    for a in jx.outvars.iter_mut() {
        if let Atom::Var(v) = a {
            fix(&mut v.aval);
        }
    }
    ClosedJaxpr { jaxpr: jx, consts: vec![] }
}

static PARTITIONED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many calls have run partitioned (per-device programs, no gather) in this process
/// (for tests and `%explain`-style diagnostics).
#[doc(hidden)]
pub fn partitioned_calls() -> u64 {
    PARTITIONED.load(std::sync::atomic::Ordering::Relaxed)
}

type Key = (usize, Vec<usize>);

fn exe_cache() -> &'static Mutex<HashMap<Key, (Arc<ClosedJaxpr>, crate::transform::pipeline::ExecutableRef)>> {
    static C: OnceLock<Mutex<HashMap<Key, (Arc<ClosedJaxpr>, crate::transform::pipeline::ExecutableRef)>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `j` partitioned on `inputs` when it is shard-local and every sharded input's
/// shards are at hand; `Ok(None)` means "take the gather path". `name` names the
/// per-shard executable (`jit(name)`). Results are sharded arrays built from per-device
/// buffers, committed to the mesh; output `k` is made in memory kind `kinds[k]` (empty: `device`).
pub(crate) fn try_run(name: &str, j: &ClosedJaxpr, inputs: &[Arc<DeviceArray>], mesh: &crate::sharding::Mesh, kinds: &[MemoryKind]) -> Result<Option<Vec<Array>>> {
    let ins: Vec<Dims> = crate::sharding::input_dims(inputs, mesh);
    let Some((shape, dims)) = shard_local(j, &ins) else { return Ok(None) };
    let ns = NamedSharding { mesh: mesh.clone(), spec: crate::sharding_rules::spec_of(&dims), memory_kind: crate::runtime::memory_kind::MemoryKind::Device };
    let blocks: Vec<(u32, BlockIndex)> = ns.blocks(&shape)?;
    // Each input's per-device data: its shard for sharded inputs, the whole for 0-d ones.
    let mut per_input: Vec<Option<HashMap<u32, Arc<DeviceArray>>>> = Vec::with_capacity(inputs.len());
    for d in inputs {
        if d.aval.ndim() == 0 {
            per_input.push(None);
            continue;
        }
        match crate::sharding::shard_map_of(d) {
            Some(m) => per_input.push(Some(m)),
            None => return Ok(None),
        }
    }
    let block_shape: Vec<usize> = blocks[0].1.iter().map(|b| b.1).collect();
    let key: Key = (j as *const ClosedJaxpr as usize, block_shape.clone());
    let cached = exe_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key).map(|(jj, e)| (jj.clone(), e.clone()));
    let exe = match cached {
        Some((jj, e)) if *jj == *j => e,
        _ => {
            let shard_j = per_shard(j, &block_shape);
            let exe = crate::transform::pipeline::compile_jaxpr(&shard_j, name, &crate::transform::pipeline::StageOptions::default())?.executable;
            exe_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, (Arc::new(j.clone()), exe.clone()));
            exe
        }
    };
    let out_avals: Vec<ShapedArray> = j.jaxpr.out_avals();
    // Per output: one pending shard per device.
    let mut out_shards: Vec<Vec<(u32, BlockIndex, Arc<DeviceArray>)>> = vec![vec![]; out_avals.len()];
    for (dev, idx) in &blocks {
        let outs: Vec<Arc<DeviceArray>> = out_avals
            .iter()
            .enumerate()
            .map(|(k, a)| {
                let block = ShapedArray { shape: block_shape.clone(), ..a.clone() };
                DeviceArray::pending_in(block, Placement { device: *dev, committed: true }, kinds.get(k).copied().unwrap_or_default())
            })
            .collect();
        let mut args: Vec<Arc<DeviceArray>> = Vec::with_capacity(inputs.len());
        for (d, m) in inputs.iter().zip(&per_input) {
            match m {
                None => args.push(d.clone()),
                Some(m) => match m.get(dev) {
                    Some(s) => args.push(s.clone()),
                    None => return Ok(None),
                },
            }
        }
        let exe = exe.clone();
        dispatch::submit_on(*dev, outs.clone(), move || {
            let bufs = args.iter().map(|d| d.wait()).collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Buffer> = bufs.iter().map(|b| b.as_ref()).collect();
            exe.execute(&refs)
        });
        for (k, o) in outs.into_iter().enumerate() {
            out_shards[k].push((*dev, idx.clone(), o));
        }
    }
    PARTITIONED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(
        out_avals
            .into_iter()
            .zip(out_shards)
            .enumerate()
            .map(|(k, (aval, shards))| {
                let ns = NamedSharding { memory_kind: kinds.get(k).copied().unwrap_or_default(), ..ns.clone() };
                Array::from_device(crate::sharding::sharded_from_shards(aval, ns, shards))
            })
            .collect(),
    ))
}
