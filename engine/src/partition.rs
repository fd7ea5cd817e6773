//! The SPMD partitioner: a jitted program called on sharded arrays is rewritten into one
//! **per-device program** (block-shaped types plus the collectives it needs) that runs on
//! every device of the mesh at once, with no gather of the whole program to one device
//! (JAX's GSPMD/Shardy partitioning, done on the jaxpr).
//!
//! Planning (`plan`) walks the global jaxpr with the propagated shardings
//! (`sharding_rules::eqn_rule`) and keeps, per value, its per-device variable, the mesh
//! axes each of its dims is split over, and optionally a **pending reduction** (a partial
//! sum/max/min over some axes that no device has combined yet):
//! - elementwise equations run on blocks laid out as their propagated result (operands
//!   resharded to it; 0-d operands are read whole);
//! - `dot_general`: operands laid out as the result's batch/free dims; a contracting dim
//!   split over the same axes on both operands stays split and the local product is a
//!   partial sum over those axes (JAX's "all-reduce for sharded contractions"); a result
//!   dim asked split over those same axes (an `out_sharding` or `out_shardings`) is whole
//!   locally and the partial sum is reduce-scattered onto it;
//! - `reduce_sum`/`reduce_max`/`reduce_min` over a split dim: the local reduction, pending
//!   `psum`/`pmax`/`pmin` over the dim's axes;
//! - `broadcast_in_dim`, `transpose`, `reshape` (a split dim staying the major dim of its
//!   group) map the layout and rewrite their shape params to block shapes;
//! - `scan`/`while`/`cond` whose bodies are shard-local run per device, nested `jit`s are
//!   inlined (`loops.rs`);
//! - anything else runs whole: its operands are all-gathered first (on the per-device
//!   program, not a gather of the whole program) and its results are replicated.
//!
//! A value is **resharded** where a consumer needs another layout: a pending sum the
//! consumer wants split over the same axes becomes a `reduce_scatter`, any other pending
//! reduction a `psum`/`pmax`/`pmin`; a split moving to a whole dim is one `all_to_all`,
//! a dim split otherwise differently is `all_gather`ed (several such dims with one
//! `all_gather` over all their axes, then local reshapes and a transpose), and a dim the consumer wants
//! split but that is whole is sliced locally (`axis_index` ×
//! block size → `dynamic_slice`). Results are resharded to the propagated shardings (or
//! the `out_shardings` asked for), so values and result shardings equal the gather path's.
//!
//! Execution (`try_run`): the per-device program is cut at its collectives into segments,
//! each compiled once (executable cache); every device's worker thread runs the segments
//! in order and meets the others at each collective (`runtime/collectives.rs`, the
//! machinery `shard_map` uses). The jobs of one call are submitted to all workers under
//! one lock, so every worker sees the calls' collectives in the same order (no deadlock
//! between concurrent callers). Results are sharded arrays made of the per-device buffers.
//!
//! Programs with effects, donation, `shard_map`/collectives inside, or literal results
//! take the gather path (`sharding.rs`); `Compiled::as_text` names the path and shows the
//! per-device program with its collectives.

use crate::error::{Error, Result};
use crate::ir::{Atom, ClosedJaxpr, Collective, DType, Eqn, Jaxpr, Literal, Primitive, Scalar, ShapedArray, Var};
use crate::runtime::dispatch::{self, DeviceArray, Placement};
use crate::runtime::{Buffer, MemoryKind};
use crate::sharding::{Mesh, NamedSharding, PartitionSpec};
use crate::sharding_rules::{spec_of, Dims};
use crate::trace::Array;
use crate::transform::pipeline::{ExecutableRef, StageOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

mod loops;

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

/// How a pending partial result combines across devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Combine {
    Sum,
    Max,
    Min,
}

/// A global value on the per-device program: its variable there (block type), the axes
/// each dim is split over, and a pending reduction over some axes.
#[derive(Clone, Debug)]
struct Val {
    var: Var,
    dims: Dims,
    partial: Option<(Combine, Vec<String>)>,
}

/// Builds the per-device program.
struct Builder<'m> {
    mesh: &'m Mesh,
    next: u32,
    eqns: Vec<Eqn>,
    /// Resharded versions already built: (global var id, dims) → per-device var.
    reshards: HashMap<(u32, Dims), Var>,
    /// Per-device vars made by `broadcast_in_dim`: (operand, broadcast_dimensions), so a
    /// consumer wanting a broadcast dim split gets a block-sized broadcast, not a slice.
    broadcasts: HashMap<u32, (Atom, Vec<usize>)>,
    /// Which path each control-flow equation took and why (`loops.rs`), for the plan's text.
    notes: Vec<String>,
}

fn replicated(ndim: usize) -> Dims {
    vec![vec![]; ndim]
}

impl<'m> Builder<'m> {
    fn fresh(&mut self, aval: ShapedArray) -> Var {
        let v = Var { id: self.next, aval };
        self.next += 1;
        v
    }

    fn parts(&self, axes: &[String]) -> usize {
        axes.iter().map(|a| self.mesh.axis_size(a).unwrap_or(1)).product()
    }

    /// The block type of a value of global type `g` laid out as `dims`; `None` when a dim
    /// does not divide.
    fn block(&self, g: &ShapedArray, dims: &Dims) -> Option<ShapedArray> {
        if dims.len() != g.ndim() {
            return None;
        }
        let mut a = g.clone();
        for (k, axes) in dims.iter().enumerate() {
            let n = self.parts(axes);
            if n == 0 || !a.shape[k].is_multiple_of(n) {
                return None;
            }
            a.shape[k] /= n;
        }
        Some(a)
    }

    /// `dims` with every dim `g` cannot be split by (or a repeated axis) left whole.
    fn fit(&self, g: &ShapedArray, dims: &Dims) -> Dims {
        if dims.len() != g.ndim() {
            return replicated(g.ndim());
        }
        let mut seen: Vec<&String> = vec![];
        dims.iter()
            .enumerate()
            .map(|(k, axes)| {
                let n = self.parts(axes);
                if axes.iter().any(|a| seen.contains(&a) || self.mesh.axis_size(a).is_none()) || n == 0 || !g.shape[k].is_multiple_of(n) {
                    return vec![];
                }
                seen.extend(axes.iter());
                axes.clone()
            })
            .collect()
    }

    fn emit(&mut self, primitive: Primitive, inputs: Vec<Atom>, outs: Vec<ShapedArray>, like: Option<&Eqn>) -> Vec<Var> {
        let outputs: Vec<Var> = outs.into_iter().map(|a| self.fresh(a)).collect();
        self.eqns.push(Eqn {
            primitive,
            inputs,
            outputs: outputs.clone(),
            source: like.and_then(|e| e.source.clone()),
            name_stack: like.and_then(|e| e.name_stack.clone()),
            metadata: like.and_then(|e| e.metadata.clone()),
        });
        outputs
    }

    fn coll(&mut self, c: Collective, x: Option<&Var>, out: ShapedArray) -> Var {
        let ins = x.map(|v| vec![Atom::Var(v.clone())]).unwrap_or_default();
        self.emit(Primitive::Collective(c), ins, vec![out], None).remove(0)
    }

    /// Combines a pending reduction: a `reduce_scatter` onto a dim `want` splits over the
    /// same axes (sums only), else `psum`/`pmax`/`pmin`.
    fn settle(&mut self, v: &Val, g: &ShapedArray, want: &Dims) -> Result<Val> {
        let Some((op, axes)) = v.partial.clone() else { return Ok(v.clone()) };
        let n = self.parts(&axes);
        let scatter = if op == Combine::Sum { (0..g.ndim()).find(|&k| v.dims[k].is_empty() && want.get(k) == Some(&axes)) } else { None };
        let mut dims = v.dims.clone();
        let var = match scatter {
            Some(k) => {
                dims[k] = axes.clone();
                let out = self.block(g, &dims).ok_or_else(|| Error::runtime("internal: reduce_scatter block"))?;
                self.coll(Collective::ReduceScatter { axes, axis_size: n, scatter_dimension: k, tiled: true }, Some(&v.var), out)
            }
            None => {
                let c = match op {
                    Combine::Sum => Collective::Psum { axes },
                    Combine::Max => Collective::Pmax { axes },
                    Combine::Min => Collective::Pmin { axes },
                };
                self.coll(c, Some(&v.var), v.var.aval.clone())
            }
        };
        Ok(Val { var, dims, partial: None })
    }

    /// `v` (of global type `g`) laid out as `want`: pending reduction combined, dims split
    /// differently all-gathered, dims wanted split sliced locally.
    fn reshard(&mut self, gid: u32, vals: &mut HashMap<u32, Val>, g: &ShapedArray, want: &Dims) -> Result<Var> {
        let v = vals.get(&gid).cloned().ok_or_else(|| Error::runtime("internal: partitioner lost a value"))?;
        let v = if v.partial.is_some() {
            let s = self.settle(&v, g, want)?;
            vals.insert(gid, s.clone());
            s
        } else {
            v
        };
        if &v.dims == want {
            return Ok(v.var);
        }
        if let Some(var) = self.reshards.get(&(gid, want.clone())) {
            return Ok(var.clone());
        }
        let mut dims = v.dims.clone();
        let mut var = v.var.clone();
        // A split moving from dim k to a whole dim j: one `all_to_all` (each device sends
        // block i of dim j to device i and concatenates what it gets along dim k), not an
        // all_gather and a local slice.
        for k in 0..g.ndim() {
            if dims[k].is_empty() || dims[k] == want[k] {
                continue;
            }
            let Some(j) = (0..g.ndim()).find(|&j| j != k && dims[j].is_empty() && want[j] == dims[k]) else { continue };
            let mut nd = dims.clone();
            nd[j] = std::mem::take(&mut nd[k]);
            let Some(out) = self.block(g, &nd) else { continue };
            let axes = nd[j].clone();
            let n = self.parts(&axes);
            var = self.coll(Collective::AllToAll { axes, axis_size: n, split_axis: j, concat_axis: k, tiled: true }, Some(&var), out);
            dims = nd;
        }
        // Several dims split otherwise than wanted (P('x', 'y') to P(), or to P('y', 'x')):
        // one `all_gather` over all their axes (a new leading dim, device blocks in the
        // axes' row-major order) and local reshapes/transpose that put each block back in
        // place, not one all_gather per dim (XLA's all-gather of several sharded dims).
        let gather: Vec<usize> = (0..g.ndim()).filter(|&k| dims[k] != want[k] && !dims[k].is_empty()).collect();
        if gather.len() > 1 {
            var = self.gather_dims(g, &var, &mut dims, &gather)?;
        }
        for k in 0..g.ndim() {
            if dims[k] != want[k] && !dims[k].is_empty() {
                let axes = std::mem::take(&mut dims[k]);
                let n = self.parts(&axes);
                let out = self.block(g, &dims).ok_or_else(|| Error::runtime("internal: all_gather block"))?;
                var = self.coll(Collective::AllGather { axes, axis_size: n, dimension: k, tiled: true }, Some(&var), out);
            }
        }
        let i32s = ShapedArray::new(&[], DType::I32);
        let lit = |x: i32| Atom::Lit(Literal { value: Scalar::I32(x), aval: ShapedArray::new(&[], DType::I32) });
        for k in 0..g.ndim() {
            if dims[k] != want[k] {
                dims[k] = want[k].clone();
                let out = self.block(g, &dims).ok_or_else(|| Error::runtime("internal: slice block"))?;
                if let Some((x, bd)) = self.broadcasts.get(&var.id).cloned() {
                    // Dim k is made by the broadcast (not read from the operand): broadcast
                    // straight to the block.
                    if bd.iter().position(|&d| d == k).is_none_or(|i| x.aval().shape.get(i) == Some(&1)) {
                        let p = Primitive::BroadcastInDim { shape: out.shape.clone(), broadcast_dimensions: bd.clone() };
                        var = self.emit(p, vec![x.clone()], vec![out], None).remove(0);
                        self.broadcasts.insert(var.id, (x, bd));
                        continue;
                    }
                }
                let idx = self.coll(Collective::AxisIndex { axes: want[k].clone() }, None, i32s.clone());
                let start = self.emit(Primitive::Mul, vec![Atom::Var(idx), lit(out.shape[k] as i32)], vec![i32s.clone()], None).remove(0);
                let mut ins = vec![Atom::Var(var.clone())];
                for j in 0..g.ndim() {
                    ins.push(if j == k { Atom::Var(start.clone()) } else { lit(0) });
                }
                var = self.emit(Primitive::DynamicSlice { slice_sizes: out.shape.clone() }, ins, vec![out], None).remove(0);
            }
        }
        self.reshards.insert((gid, want.clone()), var.clone());
        Ok(var)
    }

    /// `var` (of global type `g`, laid out as `dims`) with the dims `ks` made whole by one
    /// untiled `all_gather` over their axes (in `ks` order): [N, block..] reshaped to
    /// [n_k.., block..], each n_k moved before its dim, merged back. `dims` is updated.
    fn gather_dims(&mut self, g: &ShapedArray, var: &Var, dims: &mut Dims, ks: &[usize]) -> Result<Var> {
        let axes: Vec<String> = ks.iter().flat_map(|&k| dims[k].iter().cloned()).collect();
        let ns: Vec<usize> = ks.iter().map(|&k| self.parts(&dims[k])).collect();
        let n: usize = ns.iter().product();
        let blk = var.aval.clone();
        let mut stacked = blk.clone();
        stacked.shape.insert(0, n);
        let x = self.coll(Collective::AllGather { axes, axis_size: n, dimension: 0, tiled: false }, Some(var), stacked);
        let mut split = blk.clone();
        split.shape = ns.iter().copied().chain(blk.shape.iter().copied()).collect();
        let x = self.emit(Primitive::Reshape { new_sizes: split.shape.clone() }, vec![Atom::Var(x)], vec![split], None).remove(0);
        let m = ks.len();
        let mut perm = vec![];
        for j in 0..g.ndim() {
            if let Some(i) = ks.iter().position(|&k| k == j) {
                perm.push(i);
            }
            perm.push(m + j);
        }
        let mut moved = blk.clone();
        moved.shape = perm.iter().map(|&p| x.aval.shape[p]).collect();
        let x = self.emit(Primitive::Transpose { permutation: perm }, vec![Atom::Var(x)], vec![moved], None).remove(0);
        for &k in ks {
            dims[k] = vec![];
        }
        let out = self.block(g, dims).ok_or_else(|| Error::runtime("internal: all_gather block"))?;
        Ok(self.emit(Primitive::Reshape { new_sizes: out.shape.clone() }, vec![Atom::Var(x)], vec![out], None).remove(0))
    }

    /// Operand `a` laid out as `want` (literals as they are).
    fn operand(&mut self, a: &Atom, vals: &mut HashMap<u32, Val>, want: &Dims) -> Result<Atom> {
        match a {
            Atom::Lit(_) => Ok(a.clone()),
            Atom::Var(v) => Ok(Atom::Var(self.reshard(v.id, vals, &v.aval, want)?)),
        }
    }

    /// The current dims of `a` with any pending reduction combined.
    fn settled_dims(&mut self, a: &Atom, vals: &mut HashMap<u32, Val>) -> Result<Dims> {
        match a {
            Atom::Lit(_) => Ok(vec![]),
            Atom::Var(v) => {
                let cur = vals.get(&v.id).cloned().ok_or_else(|| Error::runtime("internal: partitioner lost a value"))?;
                if cur.partial.is_some() {
                    let s = self.settle(&cur, &v.aval, &cur.dims)?;
                    vals.insert(v.id, s);
                }
                Ok(vals[&v.id].dims.clone())
            }
        }
    }
}

/// One step of a device's run.
enum Step {
    /// A compiled segment: reads `ins`, defines `outs` (per-device var ids).
    Run { exe: ExecutableRef, ins: Vec<u32>, outs: Vec<u32> },
    /// A collective meeting the other devices.
    Coll { c: Collective, x: Option<u32>, out: Var },
}

/// A partitioned program: the per-device jaxpr, its compiled steps, where arguments and
/// results go.
pub(crate) struct Plan {
    /// The per-device program (constants first among its invars).
    pub(crate) program: Jaxpr,
    steps: Vec<Step>,
    /// Per-device var id of each constant, then of each argument.
    in_ids: Vec<u32>,
    /// Per result: per-device var id, global type, sharding.
    outs: Vec<(u32, ShapedArray, NamedSharding)>,
    /// How many collectives (communication: not `axis_index`) each device runs per call.
    pub(crate) collectives: usize,
    /// Each segment's optimized IR (for `Compiled::as_text`).
    segment_ir: Vec<String>,
    /// Each segment's lowered module (for `%lower`).
    segment_lowered: Vec<String>,
    /// The program came from `shard_map` equations (their axes are manual).
    manual: bool,
    /// Per control-flow equation: whether it runs per device or whole, and why.
    pub(crate) notes: Vec<String>,
}

/// Equations the partitioner leaves to the gather path: collectives and `shard_map`
/// (already per-device), effects, and host callbacks (a callback sees the global array
/// once, as in JAX), also inside sub-jaxprs.
fn bails(p: &Primitive) -> bool {
    matches!(p, Primitive::Collective(_) | Primitive::ShardMap(_) | Primitive::DebugCallback { .. } | Primitive::PureCallback { .. } | Primitive::IoCallback { .. })
        || p.has_effects()
        || p.sub_jaxprs().iter().any(|j| j.eqns.iter().any(|e| bails(&e.primitive)))
}

/// Whether a top-level equation sends the program to the gather path: as `bails`, but a
/// `shard_map` whose body is a plain per-device program (collectives at its top level,
/// nothing else `bails` on: no nested `shard_map`, effects, callbacks, collectives inside
/// sub-jaxprs) is inlined by the planner instead.
fn bails_top(p: &Primitive) -> bool {
    match p {
        Primitive::ShardMap(sm) => !sm.jaxpr.eqns.iter().all(|e| matches!(e.primitive, Primitive::Collective(_)) || !bails(&e.primitive)),
        p => bails(p),
    }
}

/// Inlines a `shard_map` equation `e` into the per-device program: its operands resharded
/// to the in_specs' layouts (the body's block types), the body's equations emitted as they
/// are (it is already a per-device program; its collectives become cut points), its
/// results laid out as the out_specs. `Ok(None)`: not inlinable (another mesh, a literal
/// result, or a result the out_spec says is replicated but that varies over an omitted
/// axis under `check_vma=False`): gather path.
fn inline_shard_map(b: &mut Builder, vals: &mut HashMap<u32, Val>, e: &Eqn, sm: &crate::ir::ShardMapParams) -> Result<Option<Vec<Dims>>> {
    if &sm.mesh != b.mesh || e.inputs.len() != sm.jaxpr.invars.len() || e.outputs.len() != sm.jaxpr.outvars.len() {
        return Ok(None);
    }
    let body = &sm.jaxpr;
    if !sm.check_vma {
        // Per-device results must agree along the axes an out_spec omits (each device
        // keeps its own block here; the eager path takes the first device's).
        let ins: Vec<u64> = sm.in_specs.iter().map(|s| crate::transform::shard_map::spec_mask(&sm.mesh, s)).collect();
        let vma = crate::transform::shard_map::output_vma(body, &ins, &sm.mesh);
        if vma.iter().zip(&sm.out_specs).any(|(v, s)| v & !crate::transform::shard_map::spec_mask(&sm.mesh, s) != 0) {
            return Ok(None);
        }
    }
    let mut env: HashMap<u32, Atom> = HashMap::new();
    for ((a, bv), spec) in e.inputs.iter().zip(&body.invars).zip(&sm.in_specs) {
        let want = crate::sharding_rules::dims_of(spec, a.aval().ndim());
        match b.block(a.aval(), &want) {
            Some(blk) if blk.shape == bv.aval.shape && blk.dtype == bv.aval.dtype => {}
            _ => return Ok(None),
        }
        let x = b.operand(a, vals, &want)?;
        env.insert(bv.id, x);
    }
    for be in &body.eqns {
        let mut ins = Vec::with_capacity(be.inputs.len());
        for a in &be.inputs {
            ins.push(match a {
                Atom::Lit(_) => a.clone(),
                Atom::Var(v) => env.get(&v.id).cloned().ok_or_else(|| Error::runtime("internal: shard_map body value missing"))?,
            });
        }
        let outs = b.emit(be.primitive.clone(), ins, be.outputs.iter().map(|v| v.aval.clone()).collect(), Some(be));
        for (v, o) in be.outputs.iter().zip(outs) {
            env.insert(v.id, Atom::Var(o));
        }
    }
    let mut dims = vec![];
    for ((g, o), spec) in e.outputs.iter().zip(&body.outvars).zip(&sm.out_specs) {
        let (Atom::Var(ov), d) = (o, crate::sharding_rules::dims_of(spec, g.aval.ndim())) else { return Ok(None) };
        let Some(Atom::Var(pv)) = env.get(&ov.id).cloned() else { return Ok(None) };
        vals.insert(g.id, Val { var: pv, dims: d.clone(), partial: None });
        dims.push(d);
    }
    Ok(Some(dims))
}

/// Plans `j` on arguments laid out as `args` (per-device dims: a whole argument is
/// replicated), with the propagation starting from `declared` (the arguments' shardings)
/// and results laid out as `want` (per result; `None`: the propagated sharding).
/// `Ok(None)`: not partitionable (gather path).
fn plan(j: &ClosedJaxpr, mesh: &Mesh, args: &[Dims], declared: &[Dims], want: &[Option<Dims>], name: &str, opts: &StageOptions) -> Result<Option<Plan>> {
    // Nested `jit`s are inlined: their equations are partitioned like the caller's.
    let inlined = loops::inline_pjits(&j.jaxpr);
    let jx = &inlined;
    if jx.has_effects() || jx.eqns.is_empty() || jx.eqns.iter().any(|e| bails_top(&e.primitive)) || jx.outvars.iter().any(|a| matches!(a, Atom::Lit(_))) {
        return Ok(None);
    }
    let max_id = jx
        .constvars
        .iter()
        .chain(&jx.invars)
        .map(|v| v.id)
        .chain(jx.eqns.iter().flat_map(|e| e.outputs.iter().map(|v| v.id)))
        .max()
        .unwrap_or(0);
    let mut b = Builder { mesh, next: max_id + 1, eqns: vec![], reshards: HashMap::new(), broadcasts: HashMap::new(), notes: vec![] };
    let mut vals: HashMap<u32, Val> = HashMap::new();
    let mut prop: HashMap<u32, Dims> = HashMap::new();
    let mut invars = vec![];
    for v in &jx.constvars {
        let pv = b.fresh(v.aval.clone());
        invars.push(pv.clone());
        vals.insert(v.id, Val { var: pv, dims: replicated(v.aval.ndim()), partial: None });
        prop.insert(v.id, replicated(v.aval.ndim()));
    }
    for ((v, d), dd) in jx.invars.iter().zip(args).zip(declared) {
        let Some(block) = b.block(&v.aval, d) else { return Ok(None) };
        let pv = b.fresh(block);
        invars.push(pv.clone());
        vals.insert(v.id, Val { var: pv, dims: d.clone(), partial: None });
        prop.insert(v.id, dd.clone());
    }
    let prop_of = |prop: &HashMap<u32, Dims>, a: &Atom| match a {
        Atom::Var(v) => prop.get(&v.id).cloned().unwrap_or_else(|| replicated(v.aval.ndim())),
        Atom::Lit(_) => vec![],
    };
    for e in &jx.eqns {
        if let Primitive::ShardMap(sm) = &e.primitive {
            let Some(dims) = inline_shard_map(&mut b, &mut vals, e, sm)? else { return Ok(None) };
            for (v, d) in e.outputs.iter().zip(dims) {
                prop.insert(v.id, d);
            }
            continue;
        }
        let in_avals: Vec<&ShapedArray> = e.inputs.iter().map(|a| a.aval()).collect();
        let in_prop: Vec<Dims> = e.inputs.iter().map(|a| prop_of(&prop, a)).collect();
        let out_avals: Vec<ShapedArray> = e.outputs.iter().map(|v| v.aval.clone()).collect();
        // A sharding type error is raised here, after tracing: it names the equation's line
        // (a REPL cell's, also for a function defined in an earlier cell).
        let out_prop =
            crate::sharding_rules::eqn_rule(&e.primitive, mesh, &in_avals, &in_prop, &out_avals).map_err(|err| err.at(e.source.clone()))?;
        for (v, d) in e.outputs.iter().zip(&out_prop) {
            prop.insert(v.id, d.clone());
        }
        // A loop run per device may lay its carries out as the body gives them back (a
        // whole initial value taking a split operand's layout); its results' shardings stay
        // the propagated ones (a carry's is its initial value's, as in JAX and as the
        // jaxpr's types print it): consumers and results reshard from the actual layout.
        if loops::loop_per_device(&mut b, &mut vals, e)?.is_some() {
            continue;
        }
        let one_out = e.outputs.len() == 1;
        let og = &e.outputs[0].aval;
        use Primitive::*;
        let done: Option<Val> = match &e.primitive {
            p if elementwise(p) && one_out && e.inputs.iter().all(|a| a.aval().ndim() == 0 || a.aval().shape == og.shape) => {
                let want = b.fit(og, &out_prop[0]);
                let mut ins = vec![];
                for a in &e.inputs {
                    let w = if a.aval().ndim() == 0 { vec![] } else { want.clone() };
                    ins.push(b.operand(a, &mut vals, &w)?);
                }
                let out = b.block(og, &want).ok_or_else(|| Error::runtime("internal: elementwise block"))?;
                let v = b.emit(e.primitive.clone(), ins, vec![out], Some(e)).remove(0);
                Some(Val { var: v, dims: want, partial: None })
            }
            DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, .. } if one_out && e.inputs.len() == 2 => {
                let (lg, rg) = (e.inputs[0].aval().clone(), e.inputs[1].aval().clone());
                let l = b.settled_dims(&e.inputs[0], &mut vals)?;
                let r = b.settled_dims(&e.inputs[1], &mut vals)?;
                let o = b.fit(og, &out_prop[0]);
                let (mut lw, mut rw) = (replicated(lg.ndim()), replicated(rg.ndim()));
                // Per result dim: the lhs and rhs dims it comes from.
                let mut src: Vec<(Option<usize>, Option<usize>)> = vec![];
                for (&x, &y) in lhs_batch.iter().zip(rhs_batch) {
                    src.push((Some(x), Some(y)));
                }
                src.extend((0..lg.ndim()).filter(|d| !lhs_contracting.contains(d) && !lhs_batch.contains(d)).map(|d| (Some(d), None)));
                src.extend((0..rg.ndim()).filter(|d| !rhs_contracting.contains(d) && !rhs_batch.contains(d)).map(|d| (None, Some(d))));
                for (k, (x, y)) in src.iter().enumerate() {
                    if let Some(x) = x {
                        lw[*x] = o[k].clone();
                    }
                    if let Some(y) = y {
                        rw[*y] = o[k].clone();
                    }
                }
                // The local product's layout: `o`, except a result dim split over the same
                // axes as a contraction, which is whole locally and reduce-scattered to `o`
                // (JAX's reduce-scatter for `out_sharding` splitting a free dim over the
                // contracted axes), not all-gathered and resplit.
                let mut local = o.clone();
                let mut used: Vec<String> = o.iter().flatten().cloned().collect();
                let mut contract: Vec<String> = vec![];
                for (&x, &y) in lhs_contracting.iter().zip(rhs_contracting) {
                    if l.is_empty() || r.is_empty() || l[x] != r[y] || l[x].is_empty() || !contract.is_empty() {
                        continue;
                    }
                    let scatter = (0..o.len()).find(|&k| local[k] == l[x] && src[k].0.is_none_or(|d| l[d].is_empty()) && src[k].1.is_none_or(|d| r[d].is_empty()));
                    if let Some(k) = scatter {
                        local[k] = vec![];
                        if let Some(d) = src[k].0 {
                            lw[d] = vec![];
                        }
                        if let Some(d) = src[k].1 {
                            rw[d] = vec![];
                        }
                        used.retain(|a| !l[x].contains(a));
                    }
                    if !l[x].iter().any(|a| used.contains(a)) {
                        lw[x] = l[x].clone();
                        rw[y] = r[y].clone();
                        contract.extend(l[x].iter().cloned());
                        used.extend(l[x].iter().cloned());
                    } else if let Some(k) = scatter {
                        // (Not taken: restore the split result dim.)
                        local[k] = o[k].clone();
                        if let Some(d) = src[k].0 {
                            lw[d] = o[k].clone();
                        }
                        if let Some(d) = src[k].1 {
                            rw[d] = o[k].clone();
                        }
                    }
                }
                let o = local;
                match (b.block(&lg, &lw), b.block(&rg, &rw), b.block(og, &o)) {
                    (Some(_), Some(_), Some(out)) => {
                        let x = b.operand(&e.inputs[0], &mut vals, &lw)?;
                        let y = b.operand(&e.inputs[1], &mut vals, &rw)?;
                        let v = b.emit(e.primitive.clone(), vec![x, y], vec![out], Some(e)).remove(0);
                        Some(Val { var: v, dims: o, partial: (!contract.is_empty()).then_some((Combine::Sum, contract)) })
                    }
                    _ => None,
                }
            }
            ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } if one_out && e.inputs.len() == 1 => {
                let d = b.settled_dims(&e.inputs[0], &mut vals)?;
                let x = b.operand(&e.inputs[0], &mut vals, &d)?;
                let dims: Dims = d.iter().enumerate().filter(|(k, _)| !axes.contains(k)).map(|(_, a)| a.clone()).collect();
                let mut sorted = axes.clone();
                sorted.sort_unstable();
                let over: Vec<String> = sorted.iter().flat_map(|&k| d.get(k).cloned().unwrap_or_default()).collect();
                let op = match &e.primitive {
                    ReduceSum { .. } => Combine::Sum,
                    ReduceMax { .. } => Combine::Max,
                    _ => Combine::Min,
                };
                let out = b.block(og, &dims).ok_or_else(|| Error::runtime("internal: reduction block"))?;
                let v = b.emit(e.primitive.clone(), vec![x], vec![out], Some(e)).remove(0);
                Some(Val { var: v, dims, partial: (!over.is_empty()).then_some((op, over)) })
            }
            BroadcastInDim { shape, broadcast_dimensions } if one_out && e.inputs.len() == 1 => {
                let ig = e.inputs[0].aval().clone();
                let mut d = b.settled_dims(&e.inputs[0], &mut vals)?;
                let mut dims = replicated(shape.len());
                for (i, &od) in broadcast_dimensions.iter().enumerate() {
                    if ig.shape[i] == shape[od] {
                        dims[od] = d[i].clone();
                    } else {
                        d[i] = vec![];
                    }
                }
                let x = b.operand(&e.inputs[0], &mut vals, &d)?;
                let out = b.block(og, &dims).ok_or_else(|| Error::runtime("internal: broadcast block"))?;
                let p = BroadcastInDim { shape: out.shape.clone(), broadcast_dimensions: broadcast_dimensions.clone() };
                let v = b.emit(p, vec![x.clone()], vec![out], Some(e)).remove(0);
                b.broadcasts.insert(v.id, (x, broadcast_dimensions.clone()));
                Some(Val { var: v, dims, partial: None })
            }
            ShardingConstraint { sharding } if one_out && e.inputs.len() == 1 && og.ndim() > 0 => {
                let want = if sharding.mesh.same_grid(mesh) { b.fit(og, &crate::sharding_rules::dims_of(&sharding.spec, og.ndim())) } else { b.fit(og, &out_prop[0]) };
                match b.operand(&e.inputs[0], &mut vals, &want)? {
                    Atom::Var(v) => Some(Val { var: v, dims: want, partial: None }),
                    Atom::Lit(_) => None,
                }
            }
            Transpose { permutation } if one_out && e.inputs.len() == 1 => {
                let d = b.settled_dims(&e.inputs[0], &mut vals)?;
                let x = b.operand(&e.inputs[0], &mut vals, &d)?;
                let dims: Dims = permutation.iter().map(|&p| d[p].clone()).collect();
                let out = b.block(og, &dims).ok_or_else(|| Error::runtime("internal: transpose block"))?;
                let v = b.emit(e.primitive.clone(), vec![x], vec![out], Some(e)).remove(0);
                Some(Val { var: v, dims, partial: None })
            }
            Reshape { .. } if one_out && e.inputs.len() == 1 => {
                let ig = e.inputs[0].aval().clone();
                let d = b.settled_dims(&e.inputs[0], &mut vals)?;
                let kept = crate::sharding_rules::eqn_rule(&e.primitive, mesh, &[&ig], std::slice::from_ref(&d), std::slice::from_ref(og)).ok().and_then(|mut o| o.pop());
                let count = |x: &Dims| x.iter().map(|a| a.len()).sum::<usize>();
                let (d, dims) = match kept {
                    Some(o) if count(&o) == count(&d) && b.block(og, &o).is_some() => (d, o),
                    _ => (replicated(ig.ndim()), replicated(og.ndim())),
                };
                let x = b.operand(&e.inputs[0], &mut vals, &d)?;
                let out = b.block(og, &dims).ok_or_else(|| Error::runtime("internal: reshape block"))?;
                let v = b.emit(Reshape { new_sizes: out.shape.clone() }, vec![x], vec![out], Some(e)).remove(0);
                Some(Val { var: v, dims, partial: None })
            }
            _ => None,
        };
        match done {
            Some(v) => {
                vals.insert(e.outputs[0].id, v);
            }
            None => {
                // Whole: operands gathered, results replicated.
                let mut ins = vec![];
                for a in &e.inputs {
                    ins.push(b.operand(a, &mut vals, &replicated(a.aval().ndim()))?);
                }
                let outs = b.emit(e.primitive.clone(), ins, out_avals.clone(), Some(e));
                for (g, v) in e.outputs.iter().zip(outs) {
                    vals.insert(g.id, Val { var: v, dims: replicated(g.aval.ndim()), partial: None });
                }
            }
        }
    }
    // Results laid out as asked, else as propagated.
    let mut outvars = vec![];
    let mut outs = vec![];
    for (k, a) in jx.outvars.iter().enumerate() {
        let Atom::Var(g) = a else { return Ok(None) };
        let asked = want.get(k).cloned().flatten().filter(|w| b.fit(&g.aval, w) == *w);
        let target = asked.clone().unwrap_or_else(|| b.fit(&g.aval, &prop_of(&prop, a)));
        let v = b.reshard(g.id, &mut vals, &g.aval, &target)?;
        outvars.push(Atom::Var(v.clone()));
        let spec = if target.iter().all(|e| e.is_empty()) { PartitionSpec::default() } else { spec_of(&target) };
        let ns = NamedSharding { mesh: mesh.clone(), spec, memory_kind: crate::runtime::memory_kind::MemoryKind::Device };
        outs.push((v.id, g.aval.clone(), ns));
    }
    let program = dce(Jaxpr { constvars: vec![], invars: invars.clone(), eqns: std::mem::take(&mut b.eqns), outvars });
    let collectives =
        program.eqns.iter().filter(|e| matches!(&e.primitive, Primitive::Collective(c) if !matches!(c, Collective::AxisIndex { .. } | Collective::Pvary { .. }))).count();
    let (steps, segment_ir, segment_lowered) = segments(&program, name, opts)?;
    Ok(Some(Plan {
        in_ids: invars.iter().map(|v| v.id).collect(),
        program,
        steps,
        outs,
        collectives,
        segment_ir,
        segment_lowered,
        manual: crate::transform::shard_map::contains_shard_map(jx),
        notes: std::mem::take(&mut b.notes),
    }))
}

/// `p` without equations whose results nothing uses (every device drops the same ones,
/// collectives included, so the devices still meet at the same collectives).
fn dce(mut p: Jaxpr) -> Jaxpr {
    let mut live: std::collections::HashSet<u32> = p.outvars.iter().filter_map(|a| if let Atom::Var(v) = a { Some(v.id) } else { None }).collect();
    let mut keep = vec![false; p.eqns.len()];
    for (i, e) in p.eqns.iter().enumerate().rev() {
        if e.outputs.iter().any(|v| live.contains(&v.id)) {
            keep[i] = true;
            live.extend(e.inputs.iter().filter_map(|a| if let Atom::Var(v) = a { Some(v.id) } else { None }));
        }
    }
    let mut k = keep.into_iter();
    p.eqns.retain(|_| k.next().unwrap_or(true));
    p
}

/// Cuts `p` at its collectives into compiled segments.
#[allow(clippy::type_complexity)]
fn segments(p: &Jaxpr, name: &str, opts: &StageOptions) -> Result<(Vec<Step>, Vec<String>, Vec<String>)> {
    // Last use (step index) of each var: later segments, collectives and the results.
    let n = p.eqns.len();
    let mut last_use: HashMap<u32, usize> = HashMap::new();
    for (i, e) in p.eqns.iter().enumerate() {
        for a in &e.inputs {
            if let Atom::Var(v) = a {
                last_use.insert(v.id, i);
            }
        }
    }
    for a in &p.outvars {
        if let Atom::Var(v) = a {
            last_use.insert(v.id, n);
        }
    }
    let mut steps = vec![];
    let mut irs = vec![];
    let mut lowered = vec![];
    let mut i = 0;
    while i < n {
        if let Primitive::Collective(c) = &p.eqns[i].primitive
            && !matches!(c, Collective::Pvary { .. })
        {
            let x = p.eqns[i].inputs.first().and_then(|a| match a {
                Atom::Var(v) => Some(v.id),
                Atom::Lit(_) => None,
            });
            steps.push(Step::Coll { c: c.clone(), x, out: p.eqns[i].outputs[0].clone() });
            i += 1;
            continue;
        }
        let start = i;
        // `pvary` (a type change) stays in the segment: it lowers to its operand.
        while i < n && !matches!(&p.eqns[i].primitive, Primitive::Collective(c) if !matches!(c, Collective::Pvary { .. })) {
            i += 1;
        }
        let eqns = &p.eqns[start..i];
        let mut defined: Vec<u32> = vec![];
        let mut ins: Vec<Var> = vec![];
        for e in eqns {
            for a in &e.inputs {
                if let Atom::Var(v) = a
                    && !defined.contains(&v.id)
                    && !ins.iter().any(|x| x.id == v.id)
                {
                    ins.push(v.clone());
                }
            }
            defined.extend(e.outputs.iter().map(|v| v.id));
        }
        let outs: Vec<Var> =
            eqns.iter().flat_map(|e| e.outputs.iter()).filter(|v| last_use.get(&v.id).is_some_and(|&u| u >= i)).cloned().collect();
        if outs.is_empty() {
            continue;
        }
        let seg = Jaxpr { constvars: vec![], invars: ins.clone(), eqns: eqns.to_vec(), outvars: outs.iter().cloned().map(Atom::Var).collect() };
        let art = crate::transform::pipeline::compile_jaxpr(&ClosedJaxpr { jaxpr: seg, consts: vec![], in_types: None }, name, opts)?;
        lowered.push(art.lowered.text.clone());
        let exe = art.executable;
        irs.push(exe.optimized_ir().to_string());
        steps.push(Step::Run { exe, ins: ins.iter().map(|v| v.id).collect(), outs: outs.iter().map(|v| v.id).collect() });
    }
    Ok((steps, irs, lowered))
}

static PARTITIONED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many calls have run partitioned (per-device programs, no gather) in this process
/// (for tests and `%explain`-style diagnostics).
#[doc(hidden)]
pub fn partitioned_calls() -> u64 {
    PARTITIONED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A plan's key: the jaxpr (address; the entry keeps the jaxpr to compare), the mesh (its
/// devices and axes: the plan's shardings and blocks name them), the argument layouts,
/// declared and wanted shardings, opt level and matmul precision.
type Key = (usize, Mesh, Vec<Dims>, Vec<Dims>, Vec<Option<Dims>>, Option<u8>, String);

#[allow(clippy::type_complexity)]
fn plan_cache() -> &'static Mutex<HashMap<Key, (Arc<ClosedJaxpr>, Option<Arc<Plan>>)>> {
    static C: OnceLock<Mutex<HashMap<Key, (Arc<ClosedJaxpr>, Option<Arc<Plan>>)>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops every cached plan and its per-device executables (`clear_executable_cache`).
pub(crate) fn clear_plans() {
    plan_cache().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The plan of `j` (cached per jaxpr and layouts); `None`: gather path.
pub(crate) fn cached_plan(j: &ClosedJaxpr, mesh: &Mesh, args: &[Dims], declared: &[Dims], want: &[Option<Dims>], name: &str, opts: &StageOptions) -> Result<Option<Arc<Plan>>> {
    if args.iter().all(|d| d.iter().all(|e| e.is_empty())) && !crate::transform::shard_map::contains_shard_map(&j.jaxpr) {
        return Ok(None); // nothing is split: the single-device program is the plan
    }
    let precision = format!("{:?}", crate::lax::precision::default_matmul_precision());
    let key: Key = (j as *const ClosedJaxpr as usize, mesh.clone(), args.to_vec(), declared.to_vec(), want.to_vec(), opts.opt_level, precision);
    if let Some((jj, p)) = plan_cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key)
        && **jj == *j
    {
        return Ok(p.clone());
    }
    let p = plan(j, mesh, args, declared, want, name, opts)?.map(Arc::new);
    plan_cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, (Arc::new(j.clone()), p.clone()));
    Ok(p)
}

/// Per argument: its per-device layout (its sharding when its shards exist, else whole)
/// and its declared sharding.
fn layouts(inputs: &[Arc<DeviceArray>], mesh: &Mesh) -> (Vec<Dims>, Vec<Dims>) {
    let declared = crate::sharding::input_dims(inputs, mesh);
    let args = inputs
        .iter()
        .zip(&declared)
        .map(|(d, dd)| if crate::sharding::shard_map_of(d).is_some() { dd.clone() } else { replicated(d.aval.ndim()) })
        .collect();
    (args, declared)
}

/// The text `Compiled::as_text` shows for a call on arguments split as `args`: the path, and for a
/// partitioned program the per-device jaxpr with its collectives and each compiled
/// segment's optimized IR. `None`: the gather path.
pub(crate) fn describe(j: &ClosedJaxpr, mesh: &Mesh, args: &[Dims], opts: &StageOptions) -> Option<String> {
    let p = cached_plan(j, mesh, args, args, &[], "compiled", opts).ok().flatten()?;
    Some(plan_text(&p, mesh))
}

/// What magics show for a jit call that ran partitioned (`partition::describe_call`).
pub(crate) struct CallTexts {
    /// `%compile`'s text: as `describe`.
    pub(crate) compiled: String,
    /// `%lower`'s text: for a program with `shard_map`, the global module (each
    /// `shard_map` one `sdy.manual_computation` region with its collectives, Shardy
    /// annotations on `@main`, `lower/manual.rs`); otherwise the per-device program and
    /// each segment's lowered module.
    pub(crate) lowered: String,
    /// `%cost`'s analysis of the per-device program (see `per_device_cost`).
    pub(crate) cost: crate::compile::CostAnalysis,
    /// Devices the program runs on at once.
    pub(crate) devices: usize,
}

/// The texts for the plan a jit call (`name`) on `inputs` ran; `None`: gather path.
pub(crate) fn describe_call(name: &str, j: &ClosedJaxpr, inputs: &[Arc<DeviceArray>], mesh: &Mesh, want: &[Option<Dims>], opts: &StageOptions) -> Option<CallTexts> {
    let (args, declared) = layouts(inputs, mesh);
    let p = cached_plan(j, mesh, &args, &declared, want, "compiled", opts).ok().flatten()?;
    // `%lower` shows JAX's global module (Shardy shardings on `@main`; shard_maps as manual
    // computations); the per-device segments' lowered modules only if it does not lower.
    let global = global_lowered(name, j, inputs, opts);
    Some(CallTexts {
        compiled: plan_text(&p, mesh),
        lowered: global.unwrap_or_else(|| plan_text_with(&p, mesh, &p.segment_lowered)),
        cost: per_device_cost(&p),
        devices: mesh.size(),
    })
}

/// The plan's notes (which path each control-flow equation took and why) for a call on
/// `inputs` that ran partitioned; empty when it did not.
pub(crate) fn notes(j: &ClosedJaxpr, inputs: &[Arc<DeviceArray>], mesh: &Mesh, want: &[Option<Dims>], opts: &StageOptions) -> Vec<String> {
    let (args, declared) = layouts(inputs, mesh);
    cached_plan(j, mesh, &args, &declared, want, "compiled", opts).ok().flatten().map(|p| p.notes.clone()).unwrap_or_default()
}

/// The global lowered module of `j` called on `inputs` (`shard_map`s as manual
/// computations, Shardy annotations on `@main`); `None` when it does not lower.
pub(crate) fn global_lowered(name: &str, j: &ClosedJaxpr, inputs: &[Arc<DeviceArray>], opts: &StageOptions) -> Option<String> {
    let m = crate::transform::pipeline::lower_closed(j, name, opts).ok()?;
    let leaves: Vec<Option<Arc<DeviceArray>>> = inputs.iter().cloned().map(Some).collect();
    Some(match crate::sharding_rules::annotations(j, &leaves) {
        Some(a) => crate::sharding_rules::annotate_text(&m.text, &a),
        None => m.text,
    })
}

/// The per-device cost (`per_device_cost`) of `j` called on arguments split as `args`;
/// `None`: it would take the gather path.
pub(crate) fn plan_cost(j: &ClosedJaxpr, mesh: &Mesh, args: &[Dims], opts: &StageOptions) -> Option<crate::compile::CostAnalysis> {
    cached_plan(j, mesh, args, args, &[], "compiled", opts).ok().flatten().map(|p| per_device_cost(&p))
}

/// The cost of one device's run of `p` (each of the mesh's devices runs the same
/// program on its blocks): `compile::cost_analysis` of the per-device program (block
/// shapes; bytes accessed = its arguments' and results' bytes on one device), plus one
/// flop per result element of each reducing collective (`psum`/`pmax`/`pmin`/
/// `reduce_scatter`: the combine XLA's cost analysis counts for an all-reduce). The
/// whole mesh's cost is this times the device count.
pub(crate) fn per_device_cost(p: &Plan) -> crate::compile::CostAnalysis {
    let mut c = crate::compile::cost_analysis(&p.program);
    for e in &p.program.eqns {
        if let Primitive::Collective(Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } | Collective::ReduceScatter { .. }) = &e.primitive {
            c.flops += e.outputs.iter().map(|v| v.aval.size()).sum::<usize>() as f64;
        }
    }
    c
}

fn plan_text(p: &Plan, mesh: &Mesh) -> String {
    plan_text_with(p, mesh, &p.segment_ir)
}

/// The header, the per-device program (as comments) and one module per segment.
fn plan_text_with(p: &Plan, mesh: &Mesh, modules: &[String]) -> String {
    let what = if p.manual {
        let axes: Vec<String> = mesh.axis_names().iter().map(|a| format!("'{a}'")).collect();
        format!("shard_map over {mesh}, manual axes ({}{})", axes.join(", "), if axes.len() == 1 { "," } else { "" })
    } else {
        format!("arguments sharded over {mesh}")
    };
    let mut s = format!(
        "// jaxrepl: {what}; path: partitioned (one per-device program on each of the {} devices at once, {} collective{} per device; no gather).\n",
        mesh.size(),
        p.collectives,
        if p.collectives == 1 { "" } else { "s" }
    );
    for n in &p.notes {
        s.push_str(&format!("// control flow: {n}\n"));
    }
    s.push_str("// per-device program:\n");
    for line in p.program.to_string().lines() {
        s.push_str("//   ");
        s.push_str(line);
        s.push('\n');
    }
    for (k, ir) in modules.iter().enumerate() {
        if modules.len() > 1 {
            s.push_str(&format!("// segment {k}:\n"));
        }
        s.push_str(ir);
        if !ir.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

/// Runs `j` partitioned on `inputs` (`want`: per result, the layout asked by
/// `out_shardings`, else the propagated one); `Ok(None)` means "take the gather path".
/// `name` names the per-device executables (`jit(name)`), compiled with `opts` (the
/// caller's optimisation level; the matmul precision in effect applies). Results are sharded arrays
/// built from per-device buffers, committed to the mesh; result `k` is made in memory kind
/// `kinds[k]` (empty: `device`). Errors: compilation errors; a device's runtime error is
/// the results' error.
pub(crate) fn try_run(name: &str, j: &ClosedJaxpr, inputs: &[Arc<DeviceArray>], mesh: &Mesh, want: &[Option<Dims>], opts: &StageOptions, kinds: &[MemoryKind]) -> Result<Option<Vec<Array>>> {
    let (args, declared) = layouts(inputs, mesh);
    let Some(plan) = cached_plan(j, mesh, &args, &declared, want, name, opts)? else { return Ok(None) };
    // Per argument: its per-device shards when they exist (replicated ones too: each
    // device reads its own copy), else the whole value every device reads.
    let shard_maps: Vec<Option<HashMap<u32, Arc<DeviceArray>>>> = inputs.iter().map(|d| crate::sharding::shard_map_of(d)).collect();
    let consts: Vec<Arc<Buffer>> = j.consts.clone();
    let ids = mesh.device_ids().to_vec();
    let run = crate::runtime::collectives::MeshRun::new(mesh);
    // Per result: one pending shard per device.
    let mut out_shards: Vec<Vec<(u32, crate::sharding::BlockIndex, Arc<DeviceArray>)>> = vec![vec![]; plan.outs.len()];
    let blocks: Vec<HashMap<u32, crate::sharding::BlockIndex>> =
        plan.outs.iter().map(|(_, g, ns)| ns.blocks(&g.shape).map(|b| b.into_iter().collect())).collect::<Result<_>>()?;
    let out_avals: Vec<ShapedArray> =
        plan.outs.iter().map(|(id, _, _)| plan.program.outvars.iter().find(|a| matches!(a, Atom::Var(v) if v.id == *id)).map(|a| a.aval().clone())).collect::<Option<_>>().ok_or_else(|| Error::runtime("internal: partitioned result"))?;
    // Every device worker sees the collectives of partitioned calls in one order.
    let _order = dispatch::submission_order();
    for (k, &dev) in ids.iter().enumerate() {
        let mut dargs: Vec<Arc<DeviceArray>> = Vec::with_capacity(inputs.len());
        for (d, m) in inputs.iter().zip(&shard_maps) {
            match m {
                None => dargs.push(d.clone()),
                Some(m) => dargs.push(m.get(&dev).cloned().ok_or_else(|| Error::runtime(format!("internal: no shard on device {dev}")))?),
            }
        }
        let outs: Vec<Arc<DeviceArray>> = out_avals
            .iter()
            .enumerate()
            .map(|(i, a)| DeviceArray::pending_in(a.clone(), Placement { device: dev, committed: true }, kinds.get(i).copied().unwrap_or_default()))
            .collect();
        for (i, o) in outs.iter().enumerate() {
            let idx = blocks[i].get(&dev).cloned().ok_or_else(|| Error::runtime("internal: result block"))?;
            out_shards[i].push((dev, idx, o.clone()));
        }
        let (plan, run, consts) = (plan.clone(), run.clone(), consts.clone());
        dispatch::submit_on_shared(dev, outs, move || {
            let r = run.as_device(k, || execute(&plan, dev, &consts, &dargs));
            if r.is_err() {
                run.poison();
            }
            r
        });
    }
    drop(_order);
    PARTITIONED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(
        plan.outs
            .iter()
            .zip(out_shards)
            .enumerate()
            .map(|(k, ((_, g, ns), shards))| {
                let ns = NamedSharding { memory_kind: kinds.get(k).copied().unwrap_or_default(), ..ns.clone() };
                Array::from_device(crate::sharding::sharded_from_shards(g.clone(), ns, shards))
            })
            .collect(),
    ))
}

/// One device's run of `plan` (on its worker thread, inside `MeshRun::as_device`).
fn execute(plan: &Plan, dev: u32, consts: &[Arc<Buffer>], args: &[Arc<DeviceArray>]) -> Result<Vec<Arc<Buffer>>> {
    let mut env: HashMap<u32, Arc<Buffer>> = HashMap::with_capacity(plan.program.eqns.len() + args.len());
    let mut ids = plan.in_ids.iter();
    for c in consts {
        if let Some(&id) = ids.next() {
            env.insert(id, c.clone());
        }
    }
    for a in args {
        if let Some(&id) = ids.next() {
            env.insert(id, a.wait()?);
        }
    }
    let get = |env: &HashMap<u32, Arc<Buffer>>, id: u32| env.get(&id).cloned().ok_or_else(|| Error::runtime("internal: partitioned value missing"));
    for s in &plan.steps {
        match s {
            Step::Run { exe, ins, outs } => {
                let bufs: Vec<Arc<Buffer>> = ins.iter().map(|&i| get(&env, i)).collect::<Result<_>>()?;
                let refs: Vec<&Buffer> = bufs.iter().map(|b| b.as_ref()).collect();
                let res = exe.execute(&refs)?;
                for (&o, b) in outs.iter().zip(res) {
                    env.insert(o, Arc::new(b));
                }
            }
            Step::Coll { c, x, out } => {
                let xa = match x {
                    Some(i) => {
                        let b = get(&env, *i)?;
                        let aval = b.aval().clone();
                        Some(DeviceArray::ready_on(aval, b, Placement { device: dev, committed: true }))
                    }
                    None => None,
                };
                let r = crate::runtime::collectives::run(c, xa.as_ref(), &out.aval)?;
                env.insert(out.id, r.wait()?);
            }
        }
    }
    // Results may share buffers (a psum's output is one buffer per group): not copied.
    plan.outs.iter().map(|(id, _, _)| get(&env, *id)).collect()
}

/// Per result, the layout `out_shardings` asks for on `mesh` (a `NamedSharding` on it, or
/// a spec under `set_mesh` of it); `None` where it asks for none or another placement
/// (applied after the call by `device_put`). Result `i` of `n` uses `targets[i]`, or the
/// single target for all.
pub(crate) fn wanted(targets: Option<&Vec<crate::sharding::PutTarget>>, avals: &[ShapedArray], mesh: &Mesh) -> Vec<Option<Dims>> {
    use crate::sharding::{PutTarget, Sharding};
    let Some(t) = targets else { return vec![] };
    avals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let spec = match t.get(i).or(if t.len() == 1 { t.first() } else { None })? {
                PutTarget::Sharding(Sharding::Named(ns)) if &ns.mesh == mesh && ns.memory_kind == crate::runtime::memory_kind::MemoryKind::Device => ns.spec.clone(),
                PutTarget::Spec(s) if crate::sharding::get_mesh().as_ref() == Some(mesh) => s.clone(),
                _ => return None,
            };
            (spec.0.len() <= a.ndim()).then(|| crate::sharding_rules::dims_of(&spec, a.ndim()))
        })
        .collect()
}
