//! Eager execution of one primitive outside any trace: a one-equation jaxpr compiled
//! once per (primitive, params, operand types) and run at once on the calling thread when
//! the operands are ready (else dispatched to the device worker), as JAX runs
//! `jit(prim)` for op-by-op code.
//!
//! The executable cache is keyed by a hash of the primitive's `Debug` text (written
//! straight into the hasher, no `String`) and the operand avals; a hit compares the
//! primitive and avals for equality.

use super::pipeline::{self, ExecutableRef};
use crate::error::{Error, Result};
use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, ShapedArray, Var};
use crate::runtime::{dispatch, Buffer, DeviceArray};
use crate::trace::{Array, Operand};
use super::jit::run_sync;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

struct Entry {
    prim: Primitive,
    in_avals: Vec<ShapedArray>,
    exe: ExecutableRef,
    jaxpr: ClosedJaxpr,
    /// `jit::sync_ok` of the jaxpr (no loops: runs on the calling thread).
    sync: bool,
}

fn cache() -> &'static Mutex<HashMap<u64, Vec<Arc<Entry>>>> {
    static C: OnceLock<Mutex<HashMap<u64, Vec<Arc<Entry>>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Feeds `Debug` output to a hasher without building the string.
struct HashWriter<'a, H: Hasher>(&'a mut H);
impl<H: Hasher> std::fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

fn key(prim: &Primitive, in_avals: &[&ShapedArray]) -> u64 {
    let mut h = super::jit::FxHasher::default();
    let _ = write!(HashWriter(&mut h), "{prim:?}");
    for a in in_avals {
        a.hash(&mut h);
    }
    h.finish()
}

/// Runs `prim` on `operands` now; `out_avals` come from its type rule.
pub fn apply(mut prim: Primitive, operands: Vec<Operand>, out_avals: Vec<ShapedArray>) -> Result<Vec<Array>> {
    // An eager dot at the default precision runs at the `jax_default_matmul_precision` in
    // effect now: it becomes part of the primitive, so of the cache key.
    if let Primitive::DotGeneral { precision: p @ None, .. } = &mut prim {
        *p = crate::lax::precision::default_matmul_precision();
    }
    let inputs: SmallVec<[Arc<DeviceArray>; 4]> = operands
        .into_iter()
        .map(|o| match o {
            // A tracer here outlived its trace (it leaked): JAX's UnexpectedTracerError.
            Operand::Array(a) => a.device().cloned().ok_or_else(|| match &a.0 {
                crate::trace::array::Repr::Tracer(t) => crate::trace::unexpected_tracer(t),
                _ => Error::runtime("eager operand is not a concrete array"),
            }),
            Operand::Lit(v, aval) => {
                let buf = Buffer::from_bytes(&aval, &v.to_bytes(aval.dtype)).expect("scalar size");
                Ok(DeviceArray::ready(aval, Arc::new(buf)))
            }
        })
        .collect::<Result<_>>()?;
    // Using a donated (deleted) array is an error at the op that uses it, as in JAX.
    if let Some(d) = inputs.iter().find(|d| d.is_deleted()) {
        return Err(Error::runtime(format!("Array has been deleted with shape={}.", d.aval.long_strong())));
    }
    // shard_map (issue 6): the body runs per device; collectives meet the other devices.
    if let Primitive::ShardMap(p) = &prim {
        return super::shard_map::execute(p, &inputs);
    }
    if let Primitive::Collective(c) = &prim {
        let out = crate::runtime::collectives::run(c, inputs.first(), &out_avals[0])?;
        return Ok(vec![Array::from_device(out)]);
    }
    if let Some(outs) = super::callbacks::eager(&prim, &inputs)? {
        return Ok(outs);
    }
    if let Primitive::DebugCallback { callback, .. } = &prim {
        // Effects run in order with earlier work: wait for the operands, then call.
        let bufs = inputs.iter().map(|d| d.wait().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()?;
        crate::runtime::callbacks::fire(*callback, bufs);
        return Ok(vec![]);
    }
    let place = crate::sharding::out_place(inputs.iter(), prim.name(), crate::sharding::eager_arg_name(inputs.len()))?
        .for_eqn(&prim, &inputs, &out_avals)?;
    // Results of ops on pinned-host arrays stay there (JAX's memory-space rule).
    let place = match crate::sharding_types::eager_out_kind(prim.name(), &inputs)? {
        Some(kind) => place.with_kinds(&vec![kind; out_avals.len()]),
        None => place,
    };
    let avals: SmallVec<[&ShapedArray; 4]> = inputs.iter().map(|d| &d.aval).collect();
    let k = key(&prim, &avals);
    let hit = cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&k)
        .and_then(|v| v.iter().find(|e| e.prim == prim && e.in_avals.iter().eq(avals.iter().copied())).cloned());
    let entry = match hit {
        Some(e) => e,
        None => {
            let in_avals: Vec<ShapedArray> = avals.iter().map(|a| (*a).clone()).collect();
            let jaxpr = one_eqn_jaxpr(prim.clone(), &in_avals, &out_avals);
            let exe = pipeline::compile_jaxpr(&jaxpr, prim.name(), &pipeline::StageOptions::default())?.executable;
            let sync = super::jit::sync_ok(&jaxpr.jaxpr);
            let e = Arc::new(Entry { prim, in_avals, exe, jaxpr, sync });
            cache().lock().unwrap_or_else(|e| e.into_inner()).entry(k).or_default().push(e.clone());
            e
        }
    };
    drop(avals);
    if entry.sync {
        if let Some(outs) = run_sync(&entry.exe, &entry.jaxpr, inputs.iter(), &place)? {
            return Ok(outs);
        }
    }
    let outs: Vec<Arc<DeviceArray>> = out_avals.iter().enumerate().map(|(i, a)| place.out(i, a.clone(), None)).collect();
    let exe = entry.exe.clone();
    dispatch::submit_on(place.placement.device, outs.clone(), move || {
        let bufs = inputs.iter().map(|d| d.wait()).collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Buffer> = bufs.iter().map(|b| b.as_ref()).collect();
        exe.execute(&refs)
    });
    Ok(outs.into_iter().map(Array::from_device).collect())
}

fn one_eqn_jaxpr(prim: Primitive, in_avals: &[ShapedArray], out_avals: &[ShapedArray]) -> ClosedJaxpr {
    let invars: Vec<Var> = in_avals.iter().enumerate().map(|(i, a)| Var { id: i as u32, aval: a.clone() }).collect();
    let n = invars.len() as u32;
    let outputs: Vec<Var> = out_avals.iter().enumerate().map(|(i, a)| Var { id: n + i as u32, aval: a.clone() }).collect();
    let jaxpr = Jaxpr {
        constvars: vec![],
        invars: invars.clone(),
        eqns: vec![Eqn { primitive: prim, inputs: invars.into_iter().map(Atom::Var).collect(), outputs: outputs.clone(), source: None, name_stack: None, metadata: None }],
        outvars: outputs.into_iter().map(Atom::Var).collect(),
    };
    ClosedJaxpr { jaxpr, consts: vec![], in_types: None }
}
