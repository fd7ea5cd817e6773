//! Differentiation rules: for each primitive, the tangent of its output (JVP) and the
//! cotangents of its inputs (VJP), written with `lax` operations so that the derivative
//! is itself traced, compiled and differentiable again. Zero tangents and cotangents
//! are `None`. Sources: JAX's `jax/_src/lax/lax.py` rules (the dot_general transpose
//! follows `_dot_general_transpose_lhs/rhs`).

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
use crate::lax;
use crate::trace::{Array, Operand};

type Opt = Option<Array>;

fn lit(v: f64, dtype: DType) -> Operand {
    Operand::Lit(Scalar::F64(v).cast(dtype), ShapedArray::weak(&[], dtype))
}
fn arr(a: &Array) -> Operand {
    Operand::Array(a.clone())
}
fn bin(p: Primitive, a: Operand, b: Operand) -> Result<Array> {
    lax::binary(p, a, b)
}
fn mul(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Mul, arr(a), arr(b))
}
fn add(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Add, arr(a), arr(b))
}
fn neg(a: &Array) -> Result<Array> {
    lax::bind1(Primitive::Neg, vec![arr(a)])
}
fn div(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Div, arr(a), arr(b))
}
/// ∂ rem(x, y) / ∂y = -trunc(x / y) (JAX's rule: `-sign(x/y) * floor(|x/y|)`); ∂/∂x is 1.
fn rem_dy(x: &Array, y: &Array) -> Result<Array> {
    let q = div(x, y)?;
    neg(&mul(&unary(Primitive::Sign, &q)?, &unary(Primitive::Floor, &unary(Primitive::Abs, &q)?)?)?)
}

fn unary(p: Primitive, a: &Array) -> Result<Array> {
    lax::bind1(p, vec![arr(a)])
}
fn scale(a: &Array, v: f64) -> Result<Array> {
    bin(Primitive::Mul, arr(a), lit(v, a.dtype()))
}
fn zeros_like(a: &ShapedArray) -> Result<Array> {
    let z = lax::bind1(
        Primitive::BroadcastInDim { shape: a.shape.clone(), broadcast_dimensions: vec![] },
        vec![Operand::Lit(Scalar::F64(0.0).cast(a.dtype), ShapedArray::new(&[], a.dtype))],
    )?;
    Ok(z)
}
fn select(pred: &Array, on_true: &Array, on_false: &Array) -> Result<Array> {
    lax::select_n(pred, &[on_false.clone(), on_true.clone()])
}

/// Adds two optional tangents/cotangents with `add_any`, as JAX accumulates them.
pub fn add_opt(a: Opt, b: Opt) -> Result<Opt> {
    Ok(match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => Some(bin(Primitive::AddAny, arr(&a), arr(&b))?),
    })
}

/// Makes `x` (a tangent or cotangent) have the type `aval`: sums away an implicit
/// scalar broadcast, broadcasts a 0-d value to a shape, and converts the dtype.
pub fn fit(x: Array, aval: &ShapedArray) -> Result<Array> {
    let mut x = x;
    if aval.shape.is_empty() && x.ndim() > 0 {
        let axes: Vec<usize> = (0..x.ndim()).collect();
        x = lax::bind1(Primitive::ReduceSum { axes }, vec![arr(&x)])?;
    } else if x.shape() != aval.shape {
        x = lax::broadcast_to(&x, &aval.shape)?;
    }
    if x.dtype() != aval.dtype {
        x = lax::convert_element_type(&x, aval.dtype)?;
    }
    Ok(x)
}

fn is_diff(a: &ShapedArray) -> bool {
    a.dtype.is_float()
}

/// `(x, out)`-dependent derivative factor of a unary primitive: d out / d x.
fn unary_factor(p: &Primitive, x: &Array, y: &Array) -> Result<Array> {
    use Primitive::*;
    let d = x.dtype();
    match p {
        Neg => Ok(neg(&lax::binary(Primitive::Add, arr(&scale(x, 0.0)?), lit(1.0, d))?)?),
        Exp => Ok(y.clone()),
        Log => div(&bin(Add, arr(&scale(x, 0.0)?), lit(1.0, d))?, x),
        Sin => unary(Cos, x),
        Cos => neg(&unary(Sin, x)?),
        // d tan x = 1 + tan² x (JAX's tan_p JVP), from the output.
        Tan => bin(Add, lit(1.0, d), arr(&mul(y, y)?)),
        Tanh => bin(Sub, lit(1.0, d), arr(&mul(y, y)?)),
        Sqrt => div(&bin(Add, arr(&scale(x, 0.0)?), lit(0.5, d))?, y),
        Abs => {
            let one = bin(Add, arr(&scale(x, 0.0)?), lit(1.0, d))?;
            select(&bin(Ge, arr(x), lit(0.0, d))?, &one, &neg(&one)?)
        }
        // d/dx erf_inv(x) = √π/2 · e^(y²)
        ErfInv => scale(&unary(Exp, &mul(y, y)?)?, std::f64::consts::PI.sqrt() / 2.0),
        _ => Err(Error::type_error(format!("Differentiation rule for '{}' not implemented", p.name()))),
    }
}

/// JVP: the output tangent of `p` at `ins` (values) with `outs`, given input tangents.
pub fn jvp_rule(p: &Primitive, ins: &[Array], outs: &[Array], ts: &[Opt], out_aval: &ShapedArray) -> Result<Opt> {
    use Primitive::*;
    if ts.iter().all(|t| t.is_none()) || !is_diff(out_aval) {
        return Ok(None);
    }
    let t = |i: usize| -> Result<Array> {
        match &ts[i] {
            Some(t) => Ok(t.clone()),
            None => zeros_like(&ins[i].aval()),
        }
    };
    let r = match p {
        _ if p.is_unary_elementwise() => mul(&t(0)?, &unary_factor(p, &ins[0], &outs[0])?)?,
        // JAX's add jvp is an `add` of the tangents; `add_any` is linear the same way.
        Add => match (&ts[0], &ts[1]) {
            (Some(a), Some(b)) => add(a, b)?,
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (None, None) => unreachable!(),
        },
        AddAny => add_opt(ts[0].clone(), ts[1].clone())?.expect("some tangent"),
        Collective(c) => super::shard_map::collective_jvp(c, &t(0)?)?,
        Sub => match (&ts[0], &ts[1]) {
            (Some(a), Some(b)) => bin(Sub, arr(a), arr(b))?,
            (Some(a), None) => a.clone(),
            (None, Some(b)) => neg(b)?,
            (None, None) => unreachable!(),
        },
        Mul => add_opt(
            ts[0].as_ref().map(|a| mul(a, &ins[1])).transpose()?,
            ts[1].as_ref().map(|b| mul(&ins[0], b)).transpose()?,
        )?
        .expect("some tangent"),
        Rem => {
            let b = ts[1].as_ref().map(|b| mul(b, &rem_dy(&ins[0], &ins[1])?)).transpose()?;
            add_opt(ts[0].clone(), b)?.expect("some tangent")
        }
        Div => {
            let a = ts[0].as_ref().map(|a| div(a, &ins[1])).transpose()?;
            let b = ts[1].as_ref().map(|b| neg(&mul(b, &div(&outs[0], &ins[1])?)?)).transpose()?;
            add_opt(a, b)?.expect("some tangent")
        }
        Pow => {
            let (x, y, z) = (&ins[0], &ins[1], &outs[0]);
            let a = ts[0]
                .as_ref()
                .map(|tx| mul(tx, &mul(y, &bin(Pow, arr(x), arr(&bin(Sub, arr(y), lit(1.0, y.dtype()))?))?)?))
                .transpose()?;
            let b = ts[1].as_ref().map(|ty| mul(ty, &mul(&unary(Log, x)?, z)?)).transpose()?;
            add_opt(a, b)?.expect("some tangent")
        }
        Max | Min => {
            let cmp = if matches!(p, Max) { Gt } else { Lt };
            let pick = bin(cmp, arr(&ins[0]), arr(&ins[1]))?;
            let tie = bin(Eq, arr(&ins[0]), arr(&ins[1]))?;
            let (ta, tb) = (fit(t(0)?, out_aval)?, fit(t(1)?, out_aval)?);
            let avg = scale(&add(&ta, &tb)?, 0.5)?;
            select(&tie, &avg, &select(&pick, &ta, &tb)?)?
        }
        SelectN => {
            let cases = (1..ins.len()).map(|i| t(i).and_then(|x| fit(x, out_aval))).collect::<Result<Vec<_>>>()?;
            lax::select_n(&ins[0], &cases)?
        }
        ConvertElementType { new_dtype, .. } => lax::convert_element_type(&t(0)?, *new_dtype)?,
        BroadcastInDim { .. } | Reshape { .. } | Transpose { .. } | ReduceSum { .. } => {
            lax::bind1(p.clone(), vec![arr(&t(0)?)])?
        }
        ReduceMax { axes } | ReduceMin { axes } => {
            let (x, y) = (&ins[0], &outs[0]);
            let kept: Vec<usize> = (0..x.ndim()).filter(|i| !axes.contains(i)).collect();
            let yb = lax::bind1(BroadcastInDim { shape: x.shape(), broadcast_dimensions: kept }, vec![arr(y)])?;
            let mask = lax::convert_element_type(&bin(Eq, arr(x), arr(&yb))?, x.dtype())?;
            let num = lax::bind1(ReduceSum { axes: axes.clone() }, vec![arr(&mul(&t(0)?, &mask)?)])?;
            let cnt = lax::bind1(ReduceSum { axes: axes.clone() }, vec![arr(&mask)])?;
            div(&num, &cnt)?
        }
        DotGeneral { .. } => add_opt(
            ts[0].as_ref().map(|a| lax::bind1(p.clone(), vec![arr(a), arr(&ins[1])])).transpose()?,
            ts[1].as_ref().map(|b| lax::bind1(p.clone(), vec![arr(&ins[0]), arr(b)])).transpose()?,
        )?
        .expect("some tangent"),
        StopGradient => return Ok(None),
        ShardingConstraint { .. } => lax::bind1(p.clone(), vec![arr(&t(0)?)])?,
        // Linear: the tangent goes to the same memory (JAX's rule).
        DevicePut { .. } => lax::bind1(p.clone(), vec![arr(&t(0)?)])?,
        _ if p.is_comparison() => return Ok(None),
        _ => return super::ad_rules_ops::jvp(p, ins, outs, ts, out_aval),
    };
    Ok(Some(fit(r, out_aval)?))
}

fn ranges_like(lens: &[usize]) -> Vec<Vec<usize>> {
    let mut start = 0;
    lens.iter()
        .map(|&n| {
            let r = (start..start + n).collect();
            start += n;
            r
        })
        .collect()
}

fn remaining(n: usize, a: &[usize], b: &[usize]) -> Vec<usize> {
    (0..n).filter(|i| !a.contains(i) && !b.contains(i)).collect()
}

fn argsort(v: &[usize]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by_key(|&i| v[i]);
    idx
}

/// Cotangent of dot_general's lhs (JAX's `_dot_general_transpose_lhs`).
#[allow(clippy::too_many_arguments)]
fn dot_transpose_lhs(
    g: &Array,
    x: &ShapedArray,
    y: &Array,
    xc: &[usize],
    yc: &[usize],
    xb: &[usize],
    yb: &[usize],
    swap_ans: bool,
    precision: Option<crate::ir::DotPrecision>,
) -> Result<Array> {
    let x_kept = remaining(x.ndim(), xc, xb);
    let y_kept = remaining(y.ndim(), yc, yb);
    let (ans_batch, ans_y) = if swap_ans {
        let r = ranges_like(&[xb.len(), y_kept.len(), x_kept.len()]);
        (r[0].clone(), r[1].clone())
    } else {
        let r = ranges_like(&[xb.len(), x_kept.len(), y_kept.len()]);
        (r[0].clone(), r[2].clone())
    };
    let prod = lax::bind1(
        Primitive::DotGeneral {
            lhs_contracting: ans_y,
            rhs_contracting: y_kept.clone(),
            lhs_batch: ans_batch,
            rhs_batch: yb.to_vec(),
            precision,
            preferred_element_type: Some(x.dtype),
            out_sharding: None,
        },
        vec![arr(g), arr(y)],
    )?;
    let order = argsort(yc);
    let xc_sorted: Vec<usize> = order.iter().map(|&i| xc[i]).collect();
    let mut layout: Vec<usize> = xb.to_vec();
    layout.extend(&x_kept);
    layout.extend(&xc_sorted);
    let out_axes = argsort(&layout);
    if out_axes.iter().enumerate().all(|(i, &a)| i == a) {
        return Ok(prod);
    }
    lax::transpose(&prod, &out_axes)
}

/// VJP: cotangents of `p`'s inputs given the output cotangent `ct` (None: not needed,
/// e.g. integer or literal inputs).
pub fn vjp_rule(p: &Primitive, ins: &[Array], outs: &[Array], ct: &Array) -> Result<Vec<Opt>> {
    use Primitive::*;
    let avals: Vec<ShapedArray> = ins.iter().map(|a| a.aval()).collect();
    let back = |i: usize, x: Array| -> Result<Opt> {
        if is_diff(&avals[i]) { Ok(Some(fit(x, &avals[i])?)) } else { Ok(None) }
    };
    match p {
        _ if p.is_unary_elementwise() => Ok(vec![back(0, mul(ct, &unary_factor(p, &ins[0], &outs[0])?)?)?]),
        Add | AddAny => Ok(vec![back(0, ct.clone())?, back(1, ct.clone())?]),
        Collective(c) => Ok(vec![back(0, super::shard_map::collective_vjp(c, ct)?)?]),
        Sub => Ok(vec![back(0, ct.clone())?, back(1, neg(ct)?)?]),
        Mul => Ok(vec![back(0, mul(ct, &ins[1])?)?, back(1, mul(ct, &ins[0])?)?]),
        Div => Ok(vec![back(0, div(ct, &ins[1])?)?, back(1, neg(&mul(ct, &div(&outs[0], &ins[1])?)?)?)?]),
        Rem => Ok(vec![back(0, ct.clone())?, back(1, mul(ct, &rem_dy(&ins[0], &ins[1])?)?)?]),
        Pow => {
            let (x, y, z) = (&ins[0], &ins[1], &outs[0]);
            let dx = mul(ct, &mul(y, &bin(Pow, arr(x), arr(&bin(Sub, arr(y), lit(1.0, y.dtype()))?))?)?)?;
            let dy = mul(ct, &mul(&unary(Log, x)?, z)?)?;
            Ok(vec![back(0, dx)?, back(1, dy)?])
        }
        Max | Min => {
            let cmp = if matches!(p, Max) { Gt } else { Lt };
            let pick = bin(cmp, arr(&ins[0]), arr(&ins[1]))?;
            let tie = bin(Eq, arr(&ins[0]), arr(&ins[1]))?;
            let zero = scale(ct, 0.0)?;
            let half = scale(ct, 0.5)?;
            let a = select(&tie, &half, &select(&pick, ct, &zero)?)?;
            let b = select(&tie, &half, &select(&pick, &zero, ct)?)?;
            Ok(vec![back(0, a)?, back(1, b)?])
        }
        SelectN => {
            let zero = scale(ct, 0.0)?;
            let mut v = vec![None];
            for i in 1..ins.len() {
                let which = &ins[0];
                let is_i = if which.dtype() == DType::Bool {
                    bin(Eq, arr(which), Operand::Lit(Scalar::Bool(i == 2), ShapedArray::new(&[], DType::Bool)))?
                } else {
                    bin(Eq, arr(which), lit((i - 1) as f64, which.dtype()))?
                };
                v.push(back(i, select(&is_i, ct, &zero)?)?);
            }
            Ok(v)
        }
        ConvertElementType { .. } => Ok(vec![back(0, ct.clone())?]),
        BroadcastInDim { shape, broadcast_dimensions } => {
            let x = &avals[0];
            // Sum over the new dims and over dims broadcast from size 1, then reshape.
            let mut axes: Vec<usize> = (0..shape.len()).filter(|d| !broadcast_dimensions.contains(d)).collect();
            for (i, &d) in broadcast_dimensions.iter().enumerate() {
                if x.shape[i] == 1 && shape[d] != 1 {
                    axes.push(d);
                }
            }
            axes.sort();
            let s = if axes.is_empty() { ct.clone() } else { lax::bind1(ReduceSum { axes }, vec![arr(ct)])? };
            Ok(vec![back(0, lax::reshape(&s, &x.shape)?)?])
        }
        Reshape { .. } => Ok(vec![back(0, lax::reshape(ct, &avals[0].shape)?)?]),
        Transpose { permutation } => Ok(vec![back(0, lax::transpose(ct, &argsort(permutation))?)?]),
        ReduceSum { axes } => {
            let kept: Vec<usize> = (0..avals[0].ndim()).filter(|i| !axes.contains(i)).collect();
            let b = lax::bind1(BroadcastInDim { shape: avals[0].shape.clone(), broadcast_dimensions: kept }, vec![arr(ct)])?;
            Ok(vec![back(0, b)?])
        }
        ReduceMax { axes } | ReduceMin { axes } => {
            let x = &ins[0];
            let kept: Vec<usize> = (0..x.ndim()).filter(|i| !axes.contains(i)).collect();
            let bshape = BroadcastInDim { shape: x.shape(), broadcast_dimensions: kept };
            let yb = lax::bind1(bshape.clone(), vec![arr(&outs[0])])?;
            let mask = lax::convert_element_type(&bin(Eq, arr(x), arr(&yb))?, x.dtype())?;
            let cnt = lax::bind1(ReduceSum { axes: axes.clone() }, vec![arr(&mask)])?;
            let g = lax::bind1(bshape, vec![arr(&div(ct, &cnt)?)])?;
            Ok(vec![back(0, mul(&g, &mask)?)?])
        }
        DotGeneral { lhs_contracting: xc, rhs_contracting: yc, lhs_batch: xb, rhs_batch: yb, precision, .. } => {
            // The transposed products keep the forward algorithm (as JAX's rules do).
            let dx = dot_transpose_lhs(ct, &avals[0], &ins[1], xc, yc, xb, yb, false, *precision)?;
            let dy = dot_transpose_lhs(ct, &avals[1], &ins[0], yc, xc, yb, xb, true, *precision)?;
            Ok(vec![back(0, dx)?, back(1, dy)?])
        }
        StopGradient => Ok(vec![None]),
        ShardingConstraint { .. } => Ok(vec![back(0, lax::bind1(p.clone(), vec![arr(ct)])?)?]),
        // The cotangent of a memory move is the cotangent (no copy is needed on CPU).
        DevicePut { .. } => Ok(vec![back(0, ct.clone())?]),
        DebugCallback { .. } | Iota { .. } => Ok(vec![None; ins.len()]),
        _ if p.is_comparison() || matches!(p, And | Or | Not) => Ok(vec![None; ins.len()]),
        _ => super::ad_rules_ops::vjp(p, ins, outs, ct),
    }
}
