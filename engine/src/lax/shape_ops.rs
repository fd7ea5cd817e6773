//! Type rules of the array-language primitives (issue 3), called by `shape::abstract_eval`
//! for every primitive it has no arm for. Errors name the primitive and the operand
//! types (`concatenate: operands must agree except in dimension 0, got f32[2,3], f32[2,4]`).

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, ShapedArray};

fn err(p: &Primitive, msg: String) -> Error {
    Error::type_error(format!("{}: {msg}", p.name()))
}

fn types(avals: &[ShapedArray]) -> String {
    avals.iter().map(|a| a.short()).collect::<Vec<_>>().join(", ")
}

/// Output size of a windowed dim: input `n` dilated by `base`, padded by `lo`/`hi`, with a
/// window of `k` dilated by `wd` moved by `stride`. `None` when padding makes it negative.
pub fn window_out(n: usize, k: usize, stride: usize, lo: i64, hi: i64, base: usize, wd: usize) -> Option<usize> {
    let dn = if n == 0 { 0 } else { (n as i64 - 1) * base as i64 + 1 };
    let padded = dn + lo + hi;
    if padded < 0 {
        return None;
    }
    let dk = if k == 0 { 0 } else { (k as i64 - 1) * wd as i64 + 1 };
    if padded < dk {
        return Some(0);
    }
    Some(((padded - dk) / stride.max(1) as i64 + 1) as usize)
}

fn check_axes(p: &Primitive, axes: &[usize], a: &ShapedArray) -> Result<()> {
    if let Some(&ax) = axes.iter().find(|&&ax| ax >= a.ndim()) {
        return Err(Error::value_error(format!(
            "{}: axis {ax} is out of bounds for array of dimension {} ({})",
            p.name(),
            a.ndim(),
            a.short()
        )));
    }
    Ok(())
}

fn drop_axes(a: &ShapedArray, axes: &[usize]) -> Vec<usize> {
    (0..a.ndim()).filter(|i| !axes.contains(i)).map(|i| a.shape[i]).collect()
}

/// Output types of the issue-3 primitive `p` applied to operands of types `ins`.
pub fn abstract_eval(p: &Primitive, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    use Primitive::*;
    let arity = |n: usize| -> Result<()> {
        if ins.len() != n {
            return Err(err(p, format!("expected {n} operands, got {}", ins.len())));
        }
        Ok(())
    };
    let one = |a: &ShapedArray| Ok(vec![a.clone()]);
    match p {
        Sign | IntegerPow { .. } => {
            arity(1)?;
            if ins[0].dtype.is_bool() {
                return Err(err(p, format!("requires a numeric operand, got {}", ins[0].short())));
            }
            if matches!(p, IntegerPow { y } if *y < 0) && !ins[0].dtype.is_float() {
                return Err(err(p, format!("integers cannot be raised to negative powers, got {} ** {:?}", ins[0].short(), p)));
            }
            one(&ins[0])
        }
        Floor | Ceil | Round { .. } | Log1p | Expm1 | Logistic | Erf | ReducePrecision { .. } | IsFinite => {
            arity(1)?;
            if !ins[0].dtype.is_float() {
                return Err(err(p, format!("requires a floating-point operand, got {}", ins[0].short())));
            }
            if let ReducePrecision { exponent_bits, .. } = p {
                if *exponent_bits < 1 {
                    return Err(err(p, "exponent_bits must be at least 1".into()));
                }
            }
            if matches!(p, IsFinite) {
                return Ok(vec![ShapedArray::new(&ins[0].shape, DType::Bool)]);
            }
            one(&ins[0])
        }
        ReduceProd { axes } | ReduceAnd { axes } | ReduceOr { axes } => {
            arity(1)?;
            let a = &ins[0];
            check_axes(p, axes, a)?;
            if matches!(p, ReduceAnd { .. } | ReduceOr { .. }) && a.dtype.is_float() {
                return Err(err(p, format!("requires a bool or integer operand, got {}", a.short())));
            }
            Ok(vec![ShapedArray { shape: drop_axes(a, axes), ..a.clone() }])
        }
        ArgMax { axes, index_dtype } | ArgMin { axes, index_dtype } => {
            arity(1)?;
            let a = &ins[0];
            check_axes(p, axes, a)?;
            if axes.len() != 1 {
                return Err(err(p, format!("takes exactly one axis, got {axes:?}")));
            }
            if a.shape[axes[0]] == 0 {
                return Err(Error::value_error(format!(
                    "{}: attempt to get {} of an empty sequence ({} along axis {})",
                    p.name(),
                    p.name(),
                    a.short(),
                    axes[0]
                )));
            }
            if !index_dtype.is_int() {
                return Err(err(p, format!("index_dtype must be an integer type, got {}", index_dtype.name())));
            }
            Ok(vec![ShapedArray::new(&drop_axes(a, axes), *index_dtype)])
        }
        Cumulative { axis, .. } => {
            arity(1)?;
            check_axes(p, &[*axis], &ins[0])?;
            one(&ins[0])
        }
        Concatenate { dimension } => {
            if ins.is_empty() {
                return Err(err(p, "needs at least one operand".into()));
            }
            let a = &ins[0];
            if *dimension >= a.ndim().max(0) || a.ndim() == 0 {
                return Err(Error::value_error(format!(
                    "concatenate: dimension {dimension} is out of bounds for operands {}",
                    types(ins)
                )));
            }
            let mut total = 0;
            for b in ins {
                let same = b.ndim() == a.ndim()
                    && b.dtype == a.dtype
                    && (0..a.ndim()).all(|i| i == *dimension || a.shape[i] == b.shape[i]);
                if !same {
                    return Err(err(p, format!(
                        "operands must have one dtype and equal shapes except in dimension {dimension}, got {}",
                        types(ins)
                    )));
                }
                total += b.shape[*dimension];
            }
            let mut shape = a.shape.clone();
            shape[*dimension] = total;
            Ok(vec![ShapedArray { shape, dtype: a.dtype, weak_type: ins.iter().all(|b| b.weak_type) }])
        }
        Pad { padding_config } => {
            arity(2)?;
            let (a, v) = (&ins[0], &ins[1]);
            if v.ndim() != 0 || v.dtype != a.dtype {
                return Err(err(p, format!("padding value must be 0-d of the operand's dtype, got {}", types(ins))));
            }
            if padding_config.len() != a.ndim() {
                return Err(err(p, format!("padding_config has {} entries for {}", padding_config.len(), a.short())));
            }
            let mut shape = vec![];
            for (&n, &(lo, hi, int)) in a.shape.iter().zip(padding_config) {
                if int < 0 {
                    return Err(err(p, format!("interior padding must be >= 0, got {padding_config:?} for {}", a.short())));
                }
                let core = if n == 0 { 0 } else { n as i64 + (n as i64 - 1) * int };
                let s = core + lo + hi;
                if s < 0 {
                    return Err(err(p, format!("padding {padding_config:?} makes a negative dimension of {}", a.short())));
                }
                shape.push(s as usize);
            }
            Ok(vec![ShapedArray { shape, ..a.clone() }])
        }
        Rev { dimensions } => {
            arity(1)?;
            check_axes(p, dimensions, &ins[0])?;
            one(&ins[0])
        }
        Squeeze { dimensions } => {
            arity(1)?;
            let a = &ins[0];
            check_axes(p, dimensions, a)?;
            if let Some(&d) = dimensions.iter().find(|&&d| a.shape[d] != 1) {
                return Err(Error::value_error(format!(
                    "squeeze: cannot select an axis to squeeze out which has size not equal to one: axis {d} of {}",
                    a.short()
                )));
            }
            Ok(vec![ShapedArray { shape: drop_axes(a, dimensions), ..a.clone() }])
        }
        Slice { start_indices, limit_indices, strides } => {
            arity(1)?;
            let a = &ins[0];
            let n = a.ndim();
            let st = strides.clone().unwrap_or(vec![1; n]);
            if start_indices.len() != n || limit_indices.len() != n || st.len() != n {
                return Err(err(p, format!("needs one start, limit and stride per dimension of {}", a.short())));
            }
            let mut shape = vec![];
            for i in 0..n {
                let (s, l, k) = (start_indices[i], limit_indices[i], st[i]);
                if s > l || l > a.shape[i] || k == 0 {
                    return Err(err(p, format!(
                        "start_indices {start_indices:?}, limit_indices {limit_indices:?}, strides {st:?} are out of range for {}",
                        a.short()
                    )));
                }
                shape.push((l - s).div_ceil(k));
            }
            Ok(vec![ShapedArray { shape, ..a.clone() }])
        }
        DynamicSlice { slice_sizes } => {
            let a = &ins[0];
            if ins.len() != a.ndim() + 1 || slice_sizes.len() != a.ndim() {
                return Err(err(p, format!("needs one 0-d start index and slice size per dimension of {}, got {}", a.short(), types(ins))));
            }
            if ins[1..].iter().any(|i| i.ndim() != 0 || !i.dtype.is_int()) {
                return Err(err(p, format!("start indices must be 0-d integers, got {}", types(&ins[1..]))));
            }
            if slice_sizes.iter().zip(&a.shape).any(|(s, n)| s > n) {
                return Err(err(p, format!("slice_sizes {slice_sizes:?} exceed the operand {}", a.short())));
            }
            Ok(vec![ShapedArray { shape: slice_sizes.clone(), ..a.clone() }])
        }
        DynamicUpdateSlice => {
            let (a, u) = (&ins[0], ins.get(1).ok_or_else(|| err(p, "needs an operand and an update".into()))?);
            if ins.len() != a.ndim() + 2 || u.ndim() != a.ndim() || u.dtype != a.dtype {
                return Err(err(p, format!("needs an update of the operand's rank and dtype and one 0-d index per dimension, got {}", types(ins))));
            }
            if ins[2..].iter().any(|i| i.ndim() != 0 || !i.dtype.is_int()) {
                return Err(err(p, format!("start indices must be 0-d integers, got {}", types(&ins[2..]))));
            }
            if u.shape.iter().zip(&a.shape).any(|(s, n)| s > n) {
                return Err(err(p, format!("update {} is larger than the operand {}", u.short(), a.short())));
            }
            one(a)
        }
        Split { sizes, axis } => {
            arity(1)?;
            let a = &ins[0];
            check_axes(p, &[*axis], a)?;
            if sizes.iter().sum::<usize>() != a.shape[*axis] {
                return Err(Error::value_error(format!(
                    "split: sizes {sizes:?} must sum to the size {} of axis {axis} of {}",
                    a.shape[*axis],
                    a.short()
                )));
            }
            Ok(sizes
                .iter()
                .map(|&s| {
                    let mut shape = a.shape.clone();
                    shape[*axis] = s;
                    ShapedArray { shape, ..a.clone() }
                })
                .collect())
        }
        Gather { dimension_numbers: d, slice_sizes, .. } => {
            arity(2)?;
            let (a, idx) = (&ins[0], &ins[1]);
            let k = d.start_index_map.len();
            let bad = |m: String| err(p, format!("{m} (operand {}, indices {})", a.short(), idx.short()));
            if !idx.dtype.is_int() || idx.ndim() == 0 || idx.shape[idx.ndim() - 1] != k {
                return Err(bad(format!("indices must be integers whose last dimension has size {k}")));
            }
            if slice_sizes.len() != a.ndim() || slice_sizes.iter().zip(&a.shape).any(|(s, n)| s > n) {
                return Err(bad(format!("slice_sizes {slice_sizes:?} must have one entry per operand dim, each at most its size")));
            }
            let nbatch = idx.ndim() - 1;
            if d.start_index_map.iter().chain(&d.collapsed_slice_dims).chain(&d.operand_batching_dims).any(|&i| i >= a.ndim())
                || d.collapsed_slice_dims.iter().chain(&d.operand_batching_dims).any(|&i| slice_sizes[i] != 1)
                || d.operand_batching_dims.len() != d.start_indices_batching_dims.len()
                || d.start_indices_batching_dims.iter().any(|&j| j >= nbatch)
                || d.operand_batching_dims.iter().zip(&d.start_indices_batching_dims).any(|(&o, &j)| a.shape[o] != idx.shape[j])
            {
                return Err(bad(format!("bad dimension numbers {}", d.text())));
            }
            let offsets: Vec<usize> = (0..a.ndim())
                .filter(|i| !d.collapsed_slice_dims.contains(i) && !d.operand_batching_dims.contains(i))
                .map(|i| slice_sizes[i])
                .collect();
            let rank = nbatch + offsets.len();
            if d.offset_dims.len() != offsets.len() || d.offset_dims.iter().any(|&o| o >= rank) {
                return Err(bad(format!("offset_dims {:?} do not fit an output of rank {rank}", d.offset_dims)));
            }
            let (mut oi, mut bi) = (0, 0);
            let shape: Vec<usize> = (0..rank)
                .map(|i| {
                    if d.offset_dims.contains(&i) {
                        oi += 1;
                        offsets[oi - 1]
                    } else {
                        bi += 1;
                        idx.shape[bi - 1]
                    }
                })
                .collect();
            Ok(vec![ShapedArray { shape, ..a.clone() }])
        }
        Scatter { dimension_numbers: d, .. } => {
            arity(3)?;
            let (a, idx, u) = (&ins[0], &ins[1], &ins[2]);
            let k = d.scatter_dims_to_operand_dims.len();
            let bad = |m: String| err(p, format!("{m} (operand {}, indices {}, updates {})", a.short(), idx.short(), u.short()));
            if !idx.dtype.is_int() || idx.ndim() == 0 || idx.shape[idx.ndim() - 1] != k {
                return Err(bad(format!("indices must be integers whose last dimension has size {k}")));
            }
            if u.dtype != a.dtype {
                return Err(bad("updates must have the operand's dtype".into()));
            }
            let window: Vec<usize> = (0..a.ndim())
                .filter(|i| !d.inserted_window_dims.contains(i) && !d.operand_batching_dims.contains(i))
                .map(|i| a.shape[i])
                .collect();
            let nbatch = idx.ndim() - 1;
            if d.operand_batching_dims.len() != d.scatter_indices_batching_dims.len()
                || d.operand_batching_dims.iter().zip(&d.scatter_indices_batching_dims).any(|(&o, &j)| o >= a.ndim() || j >= nbatch || a.shape[o] != idx.shape[j])
            {
                return Err(bad(format!("bad dimension numbers {}", d.text())));
            }
            if u.ndim() != nbatch + d.update_window_dims.len() || d.update_window_dims.len() != window.len() {
                return Err(bad(format!("updates must have rank {} ({} scatter dims and {} window dims)", nbatch + window.len(), nbatch, window.len())));
            }
            let (mut wi, mut bi) = (0, 0);
            for i in 0..u.ndim() {
                let ok = if d.update_window_dims.contains(&i) {
                    wi += 1;
                    u.shape[i] <= window[wi - 1]
                } else {
                    bi += 1;
                    u.shape[i] == idx.shape[bi - 1]
                };
                if !ok {
                    return Err(bad(format!("update dimension {i} does not fit")));
                }
            }
            one(a)
        }
        Sort { dimension, num_keys, .. } => {
            if ins.is_empty() || *num_keys == 0 || *num_keys > ins.len() {
                return Err(err(p, format!("needs at least num_keys={num_keys} operands, got {}", ins.len())));
            }
            if ins.iter().any(|b| b.shape != ins[0].shape) {
                return Err(err(p, format!("operands must have equal shapes, got {}", types(ins))));
            }
            if *dimension >= ins[0].ndim() {
                return Err(Error::value_error(format!("sort: dimension {dimension} is out of bounds for {}", ins[0].short())));
            }
            Ok(ins.to_vec())
        }
        TopK { k } => {
            arity(1)?;
            let a = &ins[0];
            if a.ndim() == 0 || *k > a.shape[a.ndim() - 1] {
                return Err(err(p, format!("k={k} must be at most the last dimension of the operand, got {}", a.short())));
            }
            let mut shape = a.shape.clone();
            *shape.last_mut().unwrap() = *k;
            Ok(vec![ShapedArray { shape: shape.clone(), ..a.clone() }, ShapedArray::new(&shape, DType::I32)])
        }
        ConvGeneralDilated {
            window_strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dimension_numbers: dn,
            feature_group_count: g,
            batch_group_count,
            preferred_element_type,
        } => {
            arity(2)?;
            let (l, r) = (&ins[0], &ins[1]);
            let n = l.ndim();
            let ns = n.saturating_sub(2);
            let bad = |m: String| err(p, format!("{m} (lhs {}, rhs {})", l.short(), r.short()));
            if n < 2 || r.ndim() != n || dn.lhs_spec.len() != n || dn.rhs_spec.len() != n || dn.out_spec.len() != n {
                return Err(bad("lhs and rhs must have equal rank >= 2 matching the dimension numbers".into()));
            }
            if window_strides.len() != ns || padding.len() != ns || lhs_dilation.len() != ns || rhs_dilation.len() != ns {
                return Err(bad(format!("strides, padding and dilations need {ns} entries")));
            }
            if l.dtype != r.dtype {
                return Err(bad("operands must have equal dtypes".into()));
            }
            if *batch_group_count != 1 {
                return Err(bad("batch_group_count other than 1 is not supported".into()));
            }
            let (cin, cout, ci) = (l.shape[dn.lhs_spec[1]], r.shape[dn.rhs_spec[0]], r.shape[dn.rhs_spec[1]]);
            if *g == 0 || cin != ci * g || cout % g != 0 {
                return Err(bad(format!(
                    "input features {cin} must equal rhs input features {ci} * feature_group_count {g}, and output features {cout} be divisible by it"
                )));
            }
            let mut out = vec![0; n];
            out[dn.out_spec[0]] = l.shape[dn.lhs_spec[0]];
            out[dn.out_spec[1]] = cout;
            for s in 0..ns {
                let (x, k) = (l.shape[dn.lhs_spec[s + 2]], r.shape[dn.rhs_spec[s + 2]]);
                out[dn.out_spec[s + 2]] =
                    window_out(x, k, window_strides[s], padding[s].0, padding[s].1, lhs_dilation[s], rhs_dilation[s])
                        .ok_or_else(|| bad(format!("padding {padding:?} makes a negative spatial size")))?;
            }
            Ok(vec![ShapedArray::new(&out, preferred_element_type.unwrap_or(l.dtype))])
        }
        ReduceWindow { window_dimensions: w, window_strides, padding, base_dilation, window_dilation, .. } => {
            arity(1)?;
            let a = &ins[0];
            let n = a.ndim();
            if w.len() != n || window_strides.len() != n || padding.len() != n || base_dilation.len() != n || window_dilation.len() != n {
                return Err(err(p, format!("window, strides, padding and dilations need one entry per dimension of {}", a.short())));
            }
            let mut shape = vec![];
            for i in 0..n {
                let o = window_out(a.shape[i], w[i], window_strides[i], padding[i].0, padding[i].1, base_dilation[i], window_dilation[i])
                    .ok_or_else(|| err(p, format!("padding {padding:?} makes a negative size for {}", a.short())))?;
                shape.push(o);
            }
            Ok(vec![ShapedArray { shape, ..a.clone() }])
        }
        _ => Err(err(p, "no type rule".into())),
    }
}
