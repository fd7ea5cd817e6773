//! Abstract evaluation: the type rule of every primitive (`ShapedArray`s in, out).
//! Errors name the primitive and the operand types, as JAX's do.

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, ShapedArray};

fn err(p: &Primitive, msg: String) -> Error {
    Error::type_error(format!("{}: {msg}", p.name()))
}

fn types(avals: &[ShapedArray]) -> String {
    avals.iter().map(|a| a.short()).collect::<Vec<_>>().join(", ")
}

/// Output types of `p` applied to operands of types `ins`.
pub fn abstract_eval(p: &Primitive, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    use Primitive::*;
    let arity = |n: usize| -> Result<()> {
        if ins.len() != n {
            return Err(err(p, format!("expected {n} operands, got {}", ins.len())));
        }
        Ok(())
    };
    match p {
        _ if p.is_unary_elementwise() => {
            arity(1)?;
            let a = &ins[0];
            let float_only = !matches!(p, Neg | Abs | Not);
            if float_only && !a.dtype.is_float() {
                return Err(err(p, format!("requires a floating-point operand, got {}", a.short())));
            }
            if matches!(p, Not) && a.dtype.is_float() {
                return Err(err(p, format!("requires a bool or integer operand, got {}", a.short())));
            }
            Ok(vec![a.clone()])
        }
        _ if p.is_binary_elementwise() => {
            arity(2)?;
            let (a, b) = (&ins[0], &ins[1]);
            if a.dtype != b.dtype {
                return Err(err(p, format!("operands must have equal dtypes, got {}", types(ins))));
            }
            let shape = if a.shape == b.shape || b.shape.is_empty() {
                a.shape.clone()
            } else if a.shape.is_empty() {
                b.shape.clone()
            } else {
                return Err(err(p, format!("incompatible shapes for broadcasting: {}", types(ins))));
            };
            if matches!(p, And | Or | Xor) && a.dtype.is_float() {
                return Err(err(p, format!("requires bool or integer operands, got {}", types(ins))));
            }
            if matches!(p, ShiftLeft | ShiftRightLogical | ShiftRightArithmetic) && !a.dtype.is_int() {
                return Err(err(p, format!("requires integer operands, got {}", types(ins))));
            }
            if matches!(p, NextAfter) && !a.dtype.is_float() {
                return Err(err(p, format!("requires floating-point operands, got {}", types(ins))));
            }
            if p.is_comparison() {
                return Ok(vec![ShapedArray::new(&shape, DType::Bool)]);
            }
            Ok(vec![ShapedArray { shape, dtype: a.dtype, weak_type: a.weak_type && b.weak_type }])
        }
        SelectN => {
            if ins.len() < 2 {
                return Err(err(p, "needs a selector and at least one case".into()));
            }
            let which = &ins[0];
            if !matches!(which.dtype, DType::Bool | DType::I32) {
                return Err(err(p, format!("selector must be bool or int32, got {}", which.short())));
            }
            let case = &ins[1];
            for c in &ins[2..] {
                if c.shape != case.shape || c.dtype != case.dtype {
                    return Err(err(p, format!("cases must have equal types, got {}", types(&ins[1..]))));
                }
            }
            if !which.shape.is_empty() && which.shape != case.shape {
                return Err(err(p, format!("selector shape must be () or the cases' shape, got {}", types(ins))));
            }
            Ok(vec![ShapedArray { weak_type: ins[1..].iter().all(|c| c.weak_type), ..case.clone() }])
        }
        ConvertElementType { new_dtype, weak_type } => {
            arity(1)?;
            Ok(vec![ShapedArray { shape: ins[0].shape.clone(), dtype: *new_dtype, weak_type: *weak_type }])
        }
        BroadcastInDim { shape, broadcast_dimensions } => {
            arity(1)?;
            let a = &ins[0];
            if broadcast_dimensions.len() != a.ndim() {
                return Err(err(p, format!("broadcast_dimensions {broadcast_dimensions:?} must have one entry per operand dim of {}", a.short())));
            }
            for (i, &d) in broadcast_dimensions.iter().enumerate() {
                if d >= shape.len() || (a.shape[i] != 1 && a.shape[i] != shape[d]) {
                    return Err(err(p, format!("cannot broadcast {} to shape {shape:?} with dims {broadcast_dimensions:?}", a.short())));
                }
                if i > 0 && broadcast_dimensions[i - 1] >= d {
                    return Err(err(p, "broadcast_dimensions must be strictly increasing".into()));
                }
            }
            Ok(vec![ShapedArray { shape: shape.clone(), ..a.clone() }])
        }
        Reshape { new_sizes } => {
            arity(1)?;
            let a = &ins[0];
            if new_sizes.iter().product::<usize>() != a.size() {
                return Err(err(p, format!("cannot reshape {} to {new_sizes:?}: sizes differ", a.short())));
            }
            Ok(vec![ShapedArray { shape: new_sizes.clone(), ..a.clone() }])
        }
        Transpose { permutation } => {
            arity(1)?;
            let a = &ins[0];
            let mut seen = permutation.clone();
            seen.sort();
            if seen != (0..a.ndim()).collect::<Vec<_>>() {
                return Err(err(p, format!("permutation {permutation:?} is not a permutation of the dims of {}", a.short())));
            }
            Ok(vec![ShapedArray { shape: permutation.iter().map(|&i| a.shape[i]).collect(), ..a.clone() }])
        }
        Iota { dtype, shape, dimension } => {
            arity(0)?;
            if *dimension >= shape.len() {
                return Err(err(p, format!("dimension {dimension} out of range for shape {shape:?}")));
            }
            Ok(vec![ShapedArray::new(shape, *dtype)])
        }
        ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } => {
            arity(1)?;
            let a = &ins[0];
            if let Some(&ax) = axes.iter().find(|&&ax| ax >= a.ndim()) {
                return Err(Error::value_error(format!("{}: axis {ax} is out of bounds for array of dimension {}", p.name(), a.ndim())));
            }
            let shape: Vec<usize> = (0..a.ndim()).filter(|i| !axes.contains(i)).map(|i| a.shape[i]).collect();
            // NumPy's rule (jnp.max too): an error only when a reduced axis is empty; an empty
            // array reduced over non-empty axes gives an empty result.
            if matches!(p, ReduceMax { .. } | ReduceMin { .. }) && axes.iter().any(|&ax| a.shape[ax] == 0) {
                return Err(Error::value_error(format!("{}: zero-size array to reduction operation which has no identity", p.name())));
            }
            Ok(vec![ShapedArray { shape, ..a.clone() }])
        }
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, preferred_element_type, .. } => {
            arity(2)?;
            let (l, r) = (&ins[0], &ins[1]);
            if l.dtype != r.dtype {
                return Err(err(p, format!("operands must have equal dtypes, got {}", types(ins))));
            }
            if lhs_contracting.len() != rhs_contracting.len() || lhs_batch.len() != rhs_batch.len() {
                return Err(err(p, "contracting and batch dimension lists must pair up".into()));
            }
            for (&a, &b) in lhs_contracting.iter().zip(rhs_contracting).chain(lhs_batch.iter().zip(rhs_batch)) {
                if a >= l.ndim() || b >= r.ndim() {
                    return Err(err(p, format!(
                        "dimension numbers out of range for operands {} and {}: lhs dim {a}, rhs dim {b}",
                        l.short(), r.short()
                    )));
                }
            }
            // JAX's texts (lax.dot_general's shape rule).
            let sizes = |a: &ShapedArray, dims: &[usize]| super::py_shape(&dims.iter().map(|&d| a.shape[d]).collect::<Vec<_>>());
            let (lb, rb) = (sizes(l, lhs_batch), sizes(r, rhs_batch));
            if lb != rb {
                return Err(Error::type_error(format!(
                    "dot_general requires lhs batch dimensions and rhs batch dimensions to have the same shape, got {lb} and {rb}."
                )));
            }
            let (lc, rc) = (sizes(l, lhs_contracting), sizes(r, rhs_contracting));
            if lc != rc {
                return Err(Error::type_error(format!(
                    "dot_general requires contracting dimensions to have the same shape, got {lc} and {rc}."
                )));
            }
            let mut shape: Vec<usize> = lhs_batch.iter().map(|&i| l.shape[i]).collect();
            shape.extend((0..l.ndim()).filter(|i| !lhs_contracting.contains(i) && !lhs_batch.contains(i)).map(|i| l.shape[i]));
            shape.extend((0..r.ndim()).filter(|i| !rhs_contracting.contains(i) && !rhs_batch.contains(i)).map(|i| r.shape[i]));
            let dtype = preferred_element_type.unwrap_or(l.dtype);
            Ok(vec![ShapedArray { shape, dtype, weak_type: l.weak_type && r.weak_type }])
        }
        Cond { .. } | While { .. } | Scan { .. } => super::control::abstract_eval(p, ins),
        CustomJvpCall { call_jaxpr: j, .. } | CustomVjpCall { call_jaxpr: j, .. } | Checkpoint { jaxpr: j, .. } => {
            let want = j.in_avals();
            if want.len() != ins.len() || want.iter().zip(ins).any(|(w, i)| w.shape != i.shape || w.dtype != i.dtype) {
                return Err(err(p, format!("called with {} but traced for {}", types(ins), types(&want))));
            }
            Ok(j.out_avals().into_iter().map(|a| a.strong()).collect())
        }
        BitcastConvertType { new_dtype } => {
            arity(1)?;
            let a = &ins[0];
            if a.dtype.is_bool() || new_dtype.is_bool() || a.dtype.size_bytes() != new_dtype.size_bytes() {
                return Err(err(p, format!(
                    "can only reinterpret between non-bool dtypes of one bit width, got {} to {}",
                    a.short(),
                    new_dtype.name()
                )));
            }
            Ok(vec![ShapedArray::new(&a.shape, *new_dtype)])
        }
        StopGradient | ShardingConstraint { .. } | DevicePut { .. } => {
            arity(1)?;
            Ok(vec![ins[0].clone()])
        }
        DebugCallback { .. } => Ok(vec![]),
        PureCallback { result_avals, .. } | IoCallback { result_avals, .. } => Ok(result_avals.clone()),
        Collective(c) => super::parallel::abstract_eval(c, ins),
        ShardMap(sm) => crate::transform::shard_map::abstract_eval(sm, ins),
        Pjit { jaxpr, .. } => {
            let want = jaxpr.jaxpr.in_avals();
            if want.len() != ins.len() || want.iter().zip(ins).any(|(w, i)| w.shape != i.shape || w.dtype != i.dtype) {
                return Err(err(p, format!("called with {} but traced for {}", types(ins), types(&want))));
            }
            Ok(jaxpr.jaxpr.out_avals())
        }
        _ => super::shape_ops::abstract_eval(p, ins),
    }
}
