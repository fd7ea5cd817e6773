//! Eager execution of one primitive outside any trace: a one-equation jaxpr compiled
//! once per (primitive, params, operand types) and dispatched asynchronously, as JAX
//! runs `jit(prim)` for op-by-op code.

use super::pipeline::{self, ExecutableRef};
use crate::error::Result;
use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, ShapedArray, Var};
use crate::runtime::{dispatch, Buffer, DeviceArray};
use crate::trace::{Array, Operand};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn cache() -> &'static Mutex<HashMap<String, ExecutableRef>> {
    static C: OnceLock<Mutex<HashMap<String, ExecutableRef>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `prim` on `operands` now (asynchronously); `out_avals` come from its type rule.
pub fn apply(prim: Primitive, operands: Vec<Operand>, out_avals: Vec<ShapedArray>) -> Result<Vec<Array>> {
    let inputs: Vec<Arc<DeviceArray>> = operands
        .into_iter()
        .map(|o| match o {
            Operand::Array(a) => a.device().cloned().expect("eager operands are concrete"),
            Operand::Lit(v, aval) => {
                let buf = Buffer::from_bytes(&aval, &v.to_bytes(aval.dtype)).expect("scalar size");
                DeviceArray::ready(aval, Arc::new(buf))
            }
        })
        .collect();
    if let Primitive::DebugCallback { callback, .. } = &prim {
        // Effects run in order with earlier work: wait for the operands, then call.
        let bufs = inputs.iter().map(|d| d.wait().map(|b| (*b).clone())).collect::<Result<Vec<_>>>()?;
        crate::runtime::callbacks::fire(*callback, bufs);
        return Ok(vec![]);
    }
    let in_avals: Vec<ShapedArray> = inputs.iter().map(|d| d.aval.clone()).collect();
    let key = format!("{prim:?}|{in_avals:?}");
    let exe = {
        let hit = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        match hit {
            Some(e) => e,
            None => {
                let jaxpr = one_eqn_jaxpr(prim.clone(), &in_avals, &out_avals);
                let e = pipeline::compile_jaxpr(&jaxpr, prim.name(), &pipeline::StageOptions::default())?.executable;
                cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, e.clone());
                e
            }
        }
    };
    let outs: Vec<Arc<DeviceArray>> = out_avals.iter().map(|a| DeviceArray::pending(a.clone())).collect();
    let inputs2 = inputs.clone();
    dispatch::submit(outs.clone(), move || {
        let bufs = inputs2.iter().map(|d| d.wait()).collect::<Result<Vec<_>>>()?;
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
        eqns: vec![Eqn { primitive: prim, inputs: invars.into_iter().map(Atom::Var).collect(), outputs: outputs.clone(), source: None }],
        outvars: outputs.into_iter().map(Atom::Var).collect(),
    };
    ClosedJaxpr { jaxpr, consts: vec![] }
}
