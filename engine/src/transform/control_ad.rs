//! Differentiation of control flow: the JVP of `cond`/`while`/`scan` is the same
//! construct over JVP'd sub-jaxprs (tangents ride along as extra operands and carries);
//! the VJP of `cond` is a `cond` over VJP'd branches; the VJP of `scan` re-runs the
//! forward scan to save each step's carry, then scans backwards. Reverse-mode through
//! `while` is an error, as in JAX. Float values always get (possibly zero) tangents
//! and cotangents, which avoids a fixed point over the loop carry.

use super::ad::{jvp_jaxpr, vjp_jaxpr};
use super::interp::{eval_jaxpr, trace_to_jaxpr, OpenJaxpr};
use crate::error::{Error, Result};
use crate::ir::{Jaxpr, Primitive, Scalar, ShapedArray};
use crate::lax::control::{close, merge_branches};
use crate::lax;
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

fn zeros(a: &ShapedArray) -> Result<Array> {
    lax::bind1(
        Primitive::BroadcastInDim { shape: a.shape.clone(), broadcast_dimensions: vec![] },
        vec![Operand::Lit(Scalar::F64(0.0).cast(a.dtype), ShapedArray::new(&[], a.dtype))],
    )
}

fn float(a: &ShapedArray) -> bool {
    a.dtype.is_float()
}

fn slice_aval(a: &ShapedArray) -> ShapedArray {
    let mut s = a.strong();
    s.shape.remove(0);
    s
}

fn ops(xs: &[Array]) -> Vec<Operand> {
    xs.iter().cloned().map(Operand::Array).collect()
}

#[track_caller]
fn bind_all(p: Primitive, xs: Vec<Array>) -> Result<Vec<Array>> {
    bind(p, ops(&xs), Location::caller())
}

/// Instantiates the tangents at `slots` (zeros where `None`).
fn inst(ts: &[Option<Array>], avals: &[ShapedArray], slots: &[usize]) -> Result<Vec<Array>> {
    slots.iter().map(|&i| ts[i].clone().map(Ok).unwrap_or_else(|| zeros(&avals[i]))).collect()
}

fn float_slots(avals: &[ShapedArray]) -> Vec<usize> {
    (0..avals.len()).filter(|&i| float(&avals[i])).collect()
}

fn avals_of(xs: &[Array]) -> Vec<ShapedArray> {
    xs.iter().map(|x| x.aval().strong()).collect()
}

/// JVP of a control-flow equation: outputs and their tangents.
pub fn control_jvp(p: &Primitive, ins: &[Array], ts: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    match p {
        Primitive::Cond { branches } => cond_jvp(branches, ins, ts),
        Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
            while_jvp(cond_jaxpr, body_jaxpr, *cond_nconsts, *body_nconsts, ins, ts)
        }
        Primitive::Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => {
            scan_jvp(jaxpr, *length, *reverse, *unroll, *num_consts, *num_carry, ins, ts)
        }
        Primitive::ShardMap(sm) => super::shard_map::jvp(sm, ins, ts),
        _ => Err(Error::type_error(format!("{} is not control flow", p.name()))),
    }
}

fn cond_jvp(branches: &[Jaxpr], ins: &[Array], ts: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let ops_v = &ins[1..];
    let op_avals = avals_of(ops_v);
    let tslots = float_slots(&op_avals);
    let t_in = inst(&ts[1..], &op_avals, &tslots)?;
    let out_avals: Vec<ShapedArray> = branches[0].out_avals().iter().map(|a| a.strong()).collect();
    let oslots = float_slots(&out_avals);
    let mut avals = op_avals.clone();
    avals.extend(tslots.iter().map(|&i| op_avals[i].clone()));
    let traced = branches
        .iter()
        .map(|bj| {
            trace_to_jaxpr("cond jvp", &avals, |v| {
                let (ps, tv) = v.split_at(op_avals.len());
                let mut tin = vec![None; op_avals.len()];
                for (k, &i) in tslots.iter().enumerate() {
                    tin[i] = Some(tv[k].clone());
                }
                let (mut o, to) = jvp_jaxpr(bj, &[], ps, &tin)?;
                o.extend(inst(&to, &out_avals, &oslots)?);
                Ok(o)
            })
        })
        .collect::<Result<Vec<OpenJaxpr>>>()?;
    let (jaxprs, consts) = merge_branches(traced);
    let mut operands = vec![ins[0].clone()];
    operands.extend(consts);
    operands.extend(ops_v.iter().cloned());
    operands.extend(t_in);
    let res = bind_all(Primitive::Cond { branches: jaxprs }, operands)?;
    let n = out_avals.len();
    let mut touts = vec![None; n];
    for (k, &i) in oslots.iter().enumerate() {
        touts[i] = Some(res[n + k].clone());
    }
    Ok((res[..n].to_vec(), touts))
}

fn while_jvp(cj: &Jaxpr, bj: &Jaxpr, cn: usize, bn: usize, ins: &[Array], ts: &[Option<Array>]) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let cconsts = &ins[..cn];
    let bconsts = &ins[cn..cn + bn];
    let init = &ins[cn + bn..];
    let b_avals = avals_of(bconsts);
    let bt_slots: Vec<usize> = (0..bn).filter(|&i| ts[cn + i].is_some() && float(&b_avals[i])).collect();
    let c_avals = avals_of(init);
    let cslots = float_slots(&c_avals);
    let ct_avals: Vec<ShapedArray> = cslots.iter().map(|&i| c_avals[i].clone()).collect();
    // cond: (cconsts, carry, carry tangents) -> pred
    let mut ca = avals_of(cconsts);
    ca.extend(c_avals.clone());
    ca.extend(ct_avals.clone());
    let cjx = trace_to_jaxpr("while jvp cond", &ca, |v| eval_jaxpr(cj, &[], &v[..cn + c_avals.len()]))?;
    // body: (bconsts, bconst tangents, carry, carry tangents) -> (carry', tangents')
    let mut ba = b_avals.clone();
    ba.extend(bt_slots.iter().map(|&i| b_avals[i].clone()));
    ba.extend(c_avals.clone());
    ba.extend(ct_avals.clone());
    let nbt = bt_slots.len();
    let bjx = trace_to_jaxpr("while jvp body", &ba, |v| {
        let mut primals = v[..bn].to_vec();
        primals.extend(v[bn + nbt..bn + nbt + c_avals.len()].iter().cloned());
        let mut tin: Vec<Option<Array>> = vec![None; bn + c_avals.len()];
        for (k, &i) in bt_slots.iter().enumerate() {
            tin[i] = Some(v[bn + k].clone());
        }
        let tc = &v[bn + nbt + c_avals.len()..];
        for (k, &i) in cslots.iter().enumerate() {
            tin[bn + i] = Some(tc[k].clone());
        }
        let (mut o, to) = jvp_jaxpr(bj, &[], &primals, &tin)?;
        o.extend(inst(&to, &c_avals, &cslots)?);
        Ok(o)
    })?;
    let mut operands: Vec<Array> = cjx.consts.clone();
    operands.extend(cconsts.iter().cloned());
    operands.extend(bjx.consts.iter().cloned());
    operands.extend(bconsts.iter().cloned());
    operands.extend(bt_slots.iter().map(|&i| ts[cn + i].clone().expect("slot has a tangent")));
    operands.extend(init.iter().cloned());
    operands.extend(inst(&ts[cn + bn..], &c_avals, &cslots)?);
    let p = Primitive::While {
        cond_nconsts: cjx.consts.len() + cn,
        body_nconsts: bjx.consts.len() + bn + nbt,
        cond_jaxpr: Box::new(close(&cjx.jaxpr)),
        body_jaxpr: Box::new(close(&bjx.jaxpr)),
    };
    let res = bind_all(p, operands)?;
    let n = c_avals.len();
    let mut touts = vec![None; n];
    for (k, &i) in cslots.iter().enumerate() {
        touts[i] = Some(res[n + k].clone());
    }
    Ok((res[..n].to_vec(), touts))
}

#[allow(clippy::too_many_arguments)]
fn scan_jvp(
    j: &Jaxpr,
    length: usize,
    reverse: bool,
    unroll: usize,
    nc: usize,
    ncar: usize,
    ins: &[Array],
    ts: &[Option<Array>],
) -> Result<(Vec<Array>, Vec<Option<Array>>)> {
    let consts = &ins[..nc];
    let carry = &ins[nc..nc + ncar];
    let xs = &ins[nc + ncar..];
    let k_avals = avals_of(consts);
    let c_avals = avals_of(carry);
    let x_avals = avals_of(xs);
    let xs_slices: Vec<ShapedArray> = x_avals.iter().map(slice_aval).collect();
    let kt: Vec<usize> = (0..nc).filter(|&i| ts[i].is_some() && float(&k_avals[i])).collect();
    let cslots = float_slots(&c_avals);
    let xt: Vec<usize> = (0..xs.len()).filter(|&i| ts[nc + ncar + i].is_some() && float(&x_avals[i])).collect();
    let out_avals: Vec<ShapedArray> = j.out_avals().iter().map(|a| a.strong()).collect();
    let y_avals = &out_avals[ncar..];
    let yslots = float_slots(y_avals);
    let mut ba = k_avals.clone();
    ba.extend(kt.iter().map(|&i| k_avals[i].clone()));
    ba.extend(c_avals.clone());
    ba.extend(cslots.iter().map(|&i| c_avals[i].clone()));
    ba.extend(xs_slices.clone());
    ba.extend(xt.iter().map(|&i| xs_slices[i].clone()));
    let (nkt, nct) = (kt.len(), cslots.len());
    let body = trace_to_jaxpr("scan jvp body", &ba, |v| {
        let mut at = 0;
        let mut take = |n: usize| {
            let r = v[at..at + n].to_vec();
            at += n;
            r
        };
        let (k, ktv, c, ctv, x, xtv) = (take(nc), take(nkt), take(ncar), take(nct), take(xs.len()), take(xt.len()));
        let mut primals = k;
        primals.extend(c);
        primals.extend(x);
        let mut tin: Vec<Option<Array>> = vec![None; primals.len()];
        for (q, &i) in kt.iter().enumerate() {
            tin[i] = Some(ktv[q].clone());
        }
        for (q, &i) in cslots.iter().enumerate() {
            tin[nc + i] = Some(ctv[q].clone());
        }
        for (q, &i) in xt.iter().enumerate() {
            tin[nc + ncar + i] = Some(xtv[q].clone());
        }
        let (o, to) = jvp_jaxpr(j, &[], &primals, &tin)?;
        let mut r = o[..ncar].to_vec();
        r.extend(inst(&to[..ncar], &out_avals[..ncar], &cslots)?);
        r.extend(o[ncar..].iter().cloned());
        r.extend(inst(&to[ncar..], y_avals, &yslots)?);
        Ok(r)
    })?;
    let mut operands: Vec<Array> = body.consts.clone();
    operands.extend(consts.iter().cloned());
    operands.extend(kt.iter().map(|&i| ts[i].clone().expect("slot")));
    operands.extend(carry.iter().cloned());
    operands.extend(inst(&ts[nc..nc + ncar], &c_avals, &cslots)?);
    operands.extend(xs.iter().cloned());
    operands.extend(xt.iter().map(|&i| ts[nc + ncar + i].clone().expect("slot")));
    let p = Primitive::Scan {
        jaxpr: Box::new(close(&body.jaxpr)),
        length,
        reverse,
        unroll,
        num_consts: body.consts.len() + nc + nkt,
        num_carry: ncar + nct,
    };
    let res = bind_all(p, operands)?;
    let ny = y_avals.len();
    let mut outs = res[..ncar].to_vec();
    outs.extend(res[ncar + nct..ncar + nct + ny].iter().cloned());
    let mut touts = vec![None; ncar + ny];
    for (q, &i) in cslots.iter().enumerate() {
        touts[i] = Some(res[ncar + q].clone());
    }
    for (q, &i) in yslots.iter().enumerate() {
        touts[ncar + i] = Some(res[ncar + nct + ny + q].clone());
    }
    Ok((outs, touts))
}

/// VJP of a control-flow equation: cotangents of its inputs (None where not float).
pub fn control_vjp(p: &Primitive, ins: &[Array], cts: &[Option<Array>]) -> Result<Vec<Option<Array>>> {
    match p {
        Primitive::Cond { branches } => cond_vjp(branches, ins, cts),
        Primitive::While { .. } => Err(Error::value_error(
            "Reverse-mode differentiation does not work for lax.while_loop or lax.fori_loop with dynamic start/stop values. \
             Try using lax.scan, or using fori_loop with static start/stop.",
        )),
        Primitive::Scan { jaxpr, length, reverse, unroll, num_consts, num_carry } => {
            scan_vjp(jaxpr, *length, *reverse, *unroll, *num_consts, *num_carry, ins, cts)
        }
        Primitive::ShardMap(sm) => super::shard_map::vjp(sm, ins, cts),
        _ => Err(Error::type_error(format!("{} is not control flow", p.name()))),
    }
}

fn cond_vjp(branches: &[Jaxpr], ins: &[Array], cts: &[Option<Array>]) -> Result<Vec<Option<Array>>> {
    let ops_v = &ins[1..];
    let op_avals = avals_of(ops_v);
    let islots = float_slots(&op_avals);
    let out_avals: Vec<ShapedArray> = branches[0].out_avals().iter().map(|a| a.strong()).collect();
    let oslots = float_slots(&out_avals);
    let ct_in = inst(cts, &out_avals, &oslots)?;
    let mut avals = op_avals.clone();
    avals.extend(oslots.iter().map(|&i| out_avals[i].clone()));
    let traced = branches
        .iter()
        .map(|bj| {
            trace_to_jaxpr("cond vjp", &avals, |v| {
                let (ps, cv) = v.split_at(op_avals.len());
                let mut c = vec![None; out_avals.len()];
                for (k, &i) in oslots.iter().enumerate() {
                    c[i] = Some(cv[k].clone());
                }
                let (_, ic) = vjp_jaxpr(bj, &[], ps, &c)?;
                inst(&ic, &op_avals, &islots)
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let (jaxprs, consts) = merge_branches(traced);
    let mut operands = vec![ins[0].clone()];
    operands.extend(consts);
    operands.extend(ops_v.iter().cloned());
    operands.extend(ct_in);
    let res = bind_all(Primitive::Cond { branches: jaxprs }, operands)?;
    let mut out = vec![None; ins.len()];
    for (k, &i) in islots.iter().enumerate() {
        out[1 + i] = Some(res[k].clone());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn scan_vjp(
    j: &Jaxpr,
    length: usize,
    reverse: bool,
    unroll: usize,
    nc: usize,
    ncar: usize,
    ins: &[Array],
    cts: &[Option<Array>],
) -> Result<Vec<Option<Array>>> {
    let consts = &ins[..nc];
    let carry = &ins[nc..nc + ncar];
    let xs = &ins[nc + ncar..];
    let k_avals = avals_of(consts);
    let c_avals = avals_of(carry);
    let x_avals = avals_of(xs);
    let xs_slices: Vec<ShapedArray> = x_avals.iter().map(slice_aval).collect();
    let out_avals: Vec<ShapedArray> = j.out_avals().iter().map(|a| a.strong()).collect();
    let y_avals: Vec<ShapedArray> = out_avals[ncar..].to_vec();
    // 1. Forward again, saving each step's input carry.
    let mut fa = k_avals.clone();
    fa.extend(c_avals.clone());
    fa.extend(xs_slices.clone());
    let fwd = trace_to_jaxpr("scan vjp forward", &fa, |v| {
        let o = eval_jaxpr(j, &[], &v)?;
        let mut r = o[..ncar].to_vec();
        r.extend(v[nc..nc + ncar].iter().cloned());
        Ok(r)
    })?;
    let mut operands: Vec<Array> = fwd.consts.clone();
    operands.extend(ins.iter().cloned());
    let fres = bind_all(
        Primitive::Scan {
            jaxpr: Box::new(close(&fwd.jaxpr)),
            length,
            reverse,
            unroll,
            num_consts: fwd.consts.len() + nc,
            num_carry: ncar,
        },
        operands,
    )?;
    let saved_carries = fres[ncar..].to_vec();
    // 2. Backwards: carry = (ct of the carry, accumulated ct of the consts).
    let cslots = float_slots(&c_avals);
    let kslots = float_slots(&k_avals);
    let xslots = float_slots(&x_avals);
    let yslots = float_slots(&y_avals);
    let mut ba = k_avals.clone();
    ba.extend(cslots.iter().map(|&i| c_avals[i].clone()));
    ba.extend(kslots.iter().map(|&i| k_avals[i].clone()));
    ba.extend(c_avals.clone());
    ba.extend(xs_slices.clone());
    ba.extend(yslots.iter().map(|&i| y_avals[i].clone()));
    let (ncs, nks) = (cslots.len(), kslots.len());
    let bwd = trace_to_jaxpr("scan vjp backward", &ba, |v| {
        let mut at = 0;
        let mut take = |n: usize| {
            let r = v[at..at + n].to_vec();
            at += n;
            r
        };
        let (k, ctc, acc, ci, xi, cty) = (take(nc), take(ncs), take(nks), take(ncar), take(xs.len()), take(yslots.len()));
        let mut primals = k;
        primals.extend(ci);
        primals.extend(xi);
        let mut c_out: Vec<Option<Array>> = vec![None; out_avals.len()];
        for (q, &i) in cslots.iter().enumerate() {
            c_out[i] = Some(ctc[q].clone());
        }
        for (q, &i) in yslots.iter().enumerate() {
            c_out[ncar + i] = Some(cty[q].clone());
        }
        let (_, ic) = vjp_jaxpr(j, &[], &primals, &c_out)?;
        let mut r = inst(&ic[nc..nc + ncar], &c_avals, &cslots)?;
        let kc = inst(&ic[..nc], &k_avals, &kslots)?;
        for (a, b) in acc.iter().zip(kc) {
            r.push(lax::binary(Primitive::Add, Operand::Array(a.clone()), Operand::Array(b))?);
        }
        r.extend(inst(&ic[nc + ncar..], &xs_slices, &xslots)?);
        Ok(r)
    })?;
    let mut operands: Vec<Array> = bwd.consts.clone();
    operands.extend(consts.iter().cloned());
    operands.extend(inst(&cts[..ncar], &c_avals, &cslots)?);
    for &i in &kslots {
        operands.push(zeros(&k_avals[i])?);
    }
    operands.extend(saved_carries);
    operands.extend(xs.iter().cloned());
    for &i in &yslots {
        let mut a = y_avals[i].clone();
        a.shape.insert(0, length);
        operands.push(cts[ncar + i].clone().map(Ok).unwrap_or_else(|| zeros(&a))?);
    }
    let res = bind_all(
        Primitive::Scan {
            jaxpr: Box::new(close(&bwd.jaxpr)),
            length,
            reverse: !reverse,
            unroll,
            num_consts: bwd.consts.len() + nc,
            num_carry: ncs + nks,
        },
        operands,
    )?;
    let mut out = vec![None; ins.len()];
    for (q, &i) in cslots.iter().enumerate() {
        out[nc + i] = Some(res[q].clone());
    }
    for (q, &i) in kslots.iter().enumerate() {
        out[i] = Some(res[ncs + q].clone());
    }
    for (q, &i) in xslots.iter().enumerate() {
        out[nc + ncar + i] = Some(res[ncs + nks + q].clone());
    }
    Ok(out)
}
