//! Every primitive, lowered, compiled and run, against an independent f64 reference
//! written with ndarray: 0-d, size-1 broadcast, empty, 2-d/3-d shapes; floats, ints, bools.

use super::tests::compile_jaxpr;
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
use crate::lower::tests::Builder;
use crate::runtime::Buffer;
use ndarray::{ArrayD, Axis, IxDyn};
use DType::*;
use Primitive as P;

fn sa(shape: &[usize], d: DType) -> ShapedArray {
    ShapedArray::new(shape, d)
}

/// Deterministic test values for `a`: floats in [-3, 3] in steps of 0.5 (so comparisons
/// hit equality), ints in [-6, 6] (unsigned [0, 12]), bools alternating irregularly.
fn values(a: &ShapedArray, seed: u64, positive: bool) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..a.size())
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let k = ((s >> 33) % 13) as f64;
            match a.dtype {
                Bool => ((s >> 40) & 1) as f64,
                d if d.is_float() => if positive { 0.25 + k * 0.5 } else { (k - 6.0) * 0.5 },
                d if d.is_unsigned() || positive => k,
                _ => k - 6.0,
            }
        })
        .collect()
}

/// `v` rounded/wrapped to what dtype `d` can hold.
fn round_to(v: f64, d: DType) -> f64 {
    if !d.is_float() && d != Bool && v.is_infinite() {
        return cast(v, F64, d);
    }
    match d {
        Bool => (v != 0.0) as i32 as f64,
        F64 => v,
        F32 => v as f32 as f64,
        F16 | BF16 => {
            let b = Buffer::from_bytes(&sa(&[], d), &Scalar::F64(v).to_bytes(d)).unwrap();
            b.to_f64_vec()[0]
        }
        I8 => v as i64 as i8 as f64,
        U8 => v as i64 as u8 as f64,
        I16 => v as i64 as i16 as f64,
        I32 => v as i64 as i32 as f64,
        U32 => v as i64 as u32 as f64,
        I64 => v as i64 as f64,
    }
}

fn to_buf(a: &ShapedArray, v: &[f64]) -> Buffer {
    let bytes: Vec<u8> = v.iter().flat_map(|&x| Scalar::F64(x).to_bytes(a.dtype)).collect();
    Buffer::from_bytes(a, &bytes).unwrap()
}

fn nd(a: &ShapedArray, v: &[f64]) -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(&a.shape), v.iter().map(|&x| round_to(x, a.dtype)).collect()).unwrap()
}

/// numpy-style float→int cast, saturating (NaN → 0), as the lowering does.
fn cast(v: f64, from: DType, to: DType) -> f64 {
    if to == Bool {
        return (v != 0.0) as i32 as f64;
    }
    if to.is_float() || !from.is_float() {
        return round_to(v, to);
    }
    let (lo, hi) = match to {
        I8 => (i8::MIN as f64, i8::MAX as f64),
        U8 => (0.0, u8::MAX as f64),
        I16 => (i16::MIN as f64, i16::MAX as f64),
        I32 => (i32::MIN as f64, i32::MAX as f64),
        U32 => (0.0, u32::MAX as f64),
        _ => (i64::MIN as f64, i64::MAX as f64),
    };
    if v.is_nan() { 0.0 } else { v.trunc().clamp(lo, hi) }
}

fn int_binary(p: &Primitive, x: f64, y: f64, d: DType) -> f64 {
    let (a, b) = (x as i64, y as i64);
    let r = match p {
        P::Add => a + b,
        P::Sub => a - b,
        P::Mul => a * b,
        P::Div => if b == 0 { -1 } else { a / b },
        P::Rem => if b == 0 { a } else { a % b },
        P::Pow if b < 0 => match a {
            1 => 1,
            -1 => if b % 2 == 0 { 1 } else { -1 },
            _ => 0,
        },
        P::Pow => a.pow(b as u32),
        P::Max => a.max(b),
        P::Min => a.min(b),
        P::And => a & b,
        P::Or => a | b,
        _ => unreachable!(),
    };
    round_to(r as f64, d)
}

/// The reference value of one primitive.
fn reference(p: &Primitive, ins: &[ArrayD<f64>], dts: &[DType], out: &ShapedArray) -> ArrayD<f64> {
    let d = dts.first().copied().unwrap_or(out.dtype);
    let shape = IxDyn(&out.shape);
    let bc = |a: &ArrayD<f64>| a.broadcast(shape.clone()).unwrap().to_owned();
    let b = |v: bool| v as i32 as f64;
    let r = match p {
        p if p.is_unary_elementwise() => ins[0].mapv(|x| match p {
            P::Neg => -x,
            P::Exp => x.exp(),
            P::Log => x.ln(),
            P::Sin => x.sin(),
            P::Cos => x.cos(),
            P::Tanh => x.tanh(),
            P::Sqrt => x.sqrt(),
            P::Abs => x.abs(),
            _ if d == Bool => b(x == 0.0),
            _ => !(x as i64) as f64,
        }),
        p if p.is_binary_elementwise() => {
            let (xs, ys) = (bc(&ins[0]), bc(&ins[1]));
            let mut r = xs.clone();
            ndarray::Zip::from(&mut r).and(&xs).and(&ys).for_each(|r, &x, &y| {
                *r = match p {
                    P::Eq => b(x == y),
                    P::Ne => b(x != y),
                    P::Lt => b(x < y),
                    P::Le => b(x <= y),
                    P::Gt => b(x > y),
                    P::Ge => b(x >= y),
                    P::Max | P::Min if d.is_float() && (x.is_nan() || y.is_nan()) => f64::NAN,
                    P::Add | P::Max | P::Or if d == Bool => b(x != 0.0 || y != 0.0),
                    P::Mul | P::Min | P::And if d == Bool => b(x != 0.0 && y != 0.0),
                    _ if !d.is_float() => int_binary(p, x, y, d),
                    P::Add => x + y,
                    P::Sub => x - y,
                    P::Mul => x * y,
                    P::Div => x / y,
                    P::Rem => x % y,
                    P::Pow => x.powf(y),
                    P::Max => x.max(y),
                    P::Min => x.min(y),
                    _ => unreachable!(),
                }
            });
            r
        }
        P::SelectN => {
            let w = bc(&ins[0]);
            let cases: Vec<ArrayD<f64>> = ins[1..].iter().map(bc).collect();
            ArrayD::from_shape_fn(shape.clone(), |ix| {
                let k = (w[&ix] as usize).min(cases.len() - 1);
                cases[k][&ix]
            })
        }
        P::ConvertElementType { new_dtype, .. } => ins[0].mapv(|x| cast(x, d, *new_dtype)),
        P::BroadcastInDim { broadcast_dimensions, .. } => {
            let mut mid = vec![1usize; out.ndim()];
            for (i, &bd) in broadcast_dimensions.iter().enumerate() {
                mid[bd] = ins[0].shape()[i];
            }
            let m = ins[0].clone().into_shape_with_order(IxDyn(&mid)).unwrap();
            bc(&m)
        }
        P::Reshape { new_sizes } => {
            ArrayD::from_shape_vec(IxDyn(new_sizes), ins[0].iter().cloned().collect()).unwrap()
        }
        P::Transpose { permutation } => ins[0].view().permuted_axes(IxDyn(permutation)).to_owned(),
        P::Iota { dimension, .. } => ArrayD::from_shape_fn(shape.clone(), |ix| ix[*dimension] as f64),
        P::ReduceSum { axes } | P::ReduceMax { axes } | P::ReduceMin { axes } => {
            let mut sorted = axes.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let mut a = ins[0].clone();
            for ax in sorted {
                a = match p {
                    P::ReduceSum { .. } if d == Bool => a.fold_axis(Axis(ax), 0.0, |&s, &x| b(s != 0.0 || x != 0.0)),
                    P::ReduceSum { .. } => a.fold_axis(Axis(ax), 0.0, |&s, &x| s + x),
                    P::ReduceMax { .. } => a.fold_axis(Axis(ax), f64::NEG_INFINITY, |&s, &x| if s.is_nan() || x.is_nan() { f64::NAN } else { s.max(x) }),
                    _ => a.fold_axis(Axis(ax), f64::INFINITY, |&s, &x| if s.is_nan() || x.is_nan() { f64::NAN } else { s.min(x) }),
                };
            }
            a
        }
        P::DotGeneral { lhs_contracting: lc, rhs_contracting: rc, lhs_batch: lb, rhs_batch: rb, .. } => {
            // Transpose to [batch, free, contract] and [batch, contract, free], then loop.
            let (l, r) = (&ins[0], &ins[1]);
            let lf: Vec<usize> = (0..l.ndim()).filter(|i| !lc.contains(i) && !lb.contains(i)).collect();
            let rf: Vec<usize> = (0..r.ndim()).filter(|i| !rc.contains(i) && !rb.contains(i)).collect();
            let size = |a: &ArrayD<f64>, ix: &[usize]| ix.iter().map(|&i| a.shape()[i]).product::<usize>();
            let (nb, m, k, n) = (size(l, lb), size(l, &lf), size(l, lc), size(r, &rf));
            let lp: Vec<usize> = lb.iter().chain(&lf).chain(lc).cloned().collect();
            let rp: Vec<usize> = rb.iter().chain(rc).chain(&rf).cloned().collect();
            let l3: Vec<f64> = l.view().permuted_axes(IxDyn(&lp)).iter().cloned().collect();
            let r3: Vec<f64> = r.view().permuted_axes(IxDyn(&rp)).iter().cloned().collect();
            let mut o = vec![0.0; nb * m * n];
            for bi in 0..nb {
                for i in 0..m {
                    for j in 0..n {
                        let mut s = 0.0;
                        for kk in 0..k {
                            s += cast(l3[(bi * m + i) * k + kk], dts[0], out.dtype) * cast(r3[(bi * k + kk) * n + j], dts[1], out.dtype);
                        }
                        o[(bi * m + i) * n + j] = s;
                    }
                }
            }
            ArrayD::from_shape_vec(shape.clone(), o).unwrap()
        }
        _ => unreachable!("no reference for {}", p.name()),
    };
    r.mapv(|x| round_to(x, out.dtype))
}

fn close(g: f64, w: f64, d: DType) -> bool {
    if g.is_nan() || w.is_nan() {
        return g.is_nan() && w.is_nan();
    }
    if g == w {
        return true;
    }
    let tol = match d {
        F64 => 1e-12,
        F32 => 2e-6,
        F16 | BF16 => 1e-2,
        _ => 0.0,
    };
    (g - w).abs() <= tol * (1.0 + w.abs())
}

/// Compiles `out = p(ins)` as a one-equation jaxpr, runs it on `vals` and compares.
fn check_vals(p: Primitive, ins: &[(ShapedArray, Vec<f64>)], out: ShapedArray) {
    let mut b = Builder::new();
    let atoms: Vec<_> = ins.iter().map(|(a, _)| b.arg(&a.shape, a.dtype)).collect();
    let o = b.op(p.clone(), &atoms, &out.shape, out.dtype);
    let exe = compile_jaxpr(&b.finish(&[o]));
    let bufs: Vec<Buffer> = ins.iter().map(|(a, v)| to_buf(a, v)).collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    let got = exe.execute(&refs).unwrap().remove(0);
    assert_eq!(got.aval(), &out);
    let arrays: Vec<ArrayD<f64>> = ins.iter().map(|(a, v)| nd(a, v)).collect();
    let dts: Vec<DType> = ins.iter().map(|(a, _)| a.dtype).collect();
    let want = reference(&p, &arrays, &dts, &out);
    let g = got.to_f64_vec();
    let w: Vec<f64> = want.iter().cloned().collect();
    assert_eq!(g.len(), w.len());
    for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
        assert!(close(g, w, out.dtype), "{} {:?} -> {}: element {i}: got {g}, want {w}\ninputs {:?}", p.name(), dts, out.short(), ins);
    }
}

/// Like `check_vals` with generated inputs (`positive` for log/sqrt/pow bases).
fn check(p: Primitive, ins: &[ShapedArray], out: ShapedArray, positive: bool) {
    let vals: Vec<(ShapedArray, Vec<f64>)> = ins.iter().enumerate().map(|(i, a)| (a.clone(), values(a, i as u64 + 7, positive))).collect();
    check_vals(p, &vals, out)
}

#[test]
fn unary_float() {
    for (p, pos) in [(P::Neg, false), (P::Exp, false), (P::Log, true), (P::Sin, false), (P::Cos, false), (P::Tanh, false), (P::Sqrt, true), (P::Abs, false)] {
        check(p.clone(), &[sa(&[2, 3], F32)], sa(&[2, 3], F32), pos);
    }
    check(P::Neg, &[sa(&[], F32)], sa(&[], F32), false);
    check(P::Exp, &[sa(&[4], F64)], sa(&[4], F64), false);
    check(P::Sin, &[sa(&[5], BF16)], sa(&[5], BF16), false);
    check(P::Sqrt, &[sa(&[3], F16)], sa(&[3], F16), true);
    check_vals(P::Log, &[(sa(&[4], F32), vec![-1.0, 0.0, 1.0, f64::INFINITY])], sa(&[4], F32));
}

#[test]
fn unary_int_bool() {
    for p in [P::Neg, P::Abs, P::Not] {
        check(p, &[sa(&[7], I32)], sa(&[7], I32), false);
    }
    check(P::Not, &[sa(&[5], Bool)], sa(&[5], Bool), false);
    check(P::Not, &[sa(&[4], U8)], sa(&[4], U8), false);
    check(P::Abs, &[sa(&[3], I64)], sa(&[3], I64), false);
    check(P::Neg, &[sa(&[], I8)], sa(&[], I8), false);
}

#[test]
fn binary_float() {
    let s = [2, 2, 3];
    for p in [P::Add, P::Sub, P::Mul, P::Div, P::Rem, P::Max, P::Min] {
        check(p, &[sa(&s, F32), sa(&s, F32)], sa(&s, F32), false);
    }
    check(P::Pow, &[sa(&s, F32), sa(&s, F32)], sa(&s, F32), true);
    for p in [P::Eq, P::Ne, P::Lt, P::Le, P::Gt, P::Ge] {
        check(p, &[sa(&[3, 4], F32), sa(&[3, 4], F32)], sa(&[3, 4], Bool), false);
    }
    check(P::Div, &[sa(&[5], F64), sa(&[5], F64)], sa(&[5], F64), false);
    check(P::Add, &[sa(&[6], BF16), sa(&[6], BF16)], sa(&[6], BF16), false);
    // A 0-d operand broadcasts through a `() ` indexing map.
    check(P::Mul, &[sa(&[4], F32), sa(&[], F32)], sa(&[4], F32), false);
    // NaN: max/min propagate, ne is unordered, the rest ordered.
    let nan = vec![f64::NAN, 1.0, f64::NAN];
    let one = vec![1.0, f64::NAN, 2.0];
    for p in [P::Max, P::Min] {
        check_vals(p, &[(sa(&[3], F32), nan.clone()), (sa(&[3], F32), one.clone())], sa(&[3], F32));
    }
    for p in [P::Eq, P::Ne, P::Lt, P::Ge] {
        check_vals(p, &[(sa(&[3], F32), nan.clone()), (sa(&[3], F32), one.clone())], sa(&[3], Bool));
    }
}

#[test]
fn binary_int_bool() {
    let s = [2, 3, 2];
    for p in [P::Add, P::Sub, P::Mul, P::Div, P::Rem, P::Max, P::Min, P::And, P::Or] {
        check(p, &[sa(&s, I32), sa(&s, I32)], sa(&s, I32), false);
    }
    for p in [P::Eq, P::Ne, P::Lt, P::Le, P::Gt, P::Ge] {
        check(p.clone(), &[sa(&[9], I32), sa(&[9], I32)], sa(&[9], Bool), false);
        check(p, &[sa(&[6], Bool), sa(&[6], Bool)], sa(&[6], Bool), false);
    }
    for p in [P::Div, P::Rem, P::Max, P::Min] {
        check(p, &[sa(&[8], U32), sa(&[8], U32)], sa(&[8], U32), false);
    }
    check(P::Lt, &[sa(&[8], U8), sa(&[8], U8)], sa(&[8], Bool), false);
    check(P::Mul, &[sa(&[8], I8), sa(&[8], I8)], sa(&[8], I8), false);
    for p in [P::And, P::Or, P::Add, P::Mul, P::Max, P::Min] {
        check(p, &[sa(&[7], Bool), sa(&[7], Bool)], sa(&[7], Bool), false);
    }
    let pow_e = vec![0.0, 1.0, 2.0, 3.0, 5.0];
    check_vals(P::Pow, &[(sa(&[5], I64), vec![-3.0, 2.0, -2.0, 7.0, 3.0]), (sa(&[5], I64), pow_e)], sa(&[5], I64));
    let (base, e) = (vec![0.0, 2.0, 1.0, -1.0, -1.0, 0.0], vec![-1.0, -2.0, -5.0, -3.0, -4.0, 0.0]);
    check_vals(P::Pow, &[(sa(&[6], I32), base), (sa(&[6], I32), e)], sa(&[6], I32));
    // Division by zero and MIN / -1 do not trap.
    let m = i32::MIN as f64;
    check_vals(P::Div, &[(sa(&[4], I32), vec![7.0, m, m, -7.0]), (sa(&[4], I32), vec![0.0, -1.0, 1.0, 2.0])], sa(&[4], I32));
    check_vals(P::Rem, &[(sa(&[4], I32), vec![7.0, m, m, -7.0]), (sa(&[4], I32), vec![0.0, -1.0, 3.0, 2.0])], sa(&[4], I32));
}

#[test]
fn select_n() {
    check(P::SelectN, &[sa(&[2, 3], Bool), sa(&[2, 3], F32), sa(&[2, 3], F32)], sa(&[2, 3], F32), false);
    let which = (sa(&[6], I32), vec![0.0, 1.0, 2.0, 2.0, 1.0, 0.0]);
    let c = |s| (sa(&[6], I32), values(&sa(&[6], I32), s, false));
    check_vals(P::SelectN, &[which, c(1), c(2), c(3)], sa(&[6], I32));
    check(P::SelectN, &[sa(&[], Bool), sa(&[4], I64), sa(&[4], I64)], sa(&[4], I64), false);
    check(P::SelectN, &[sa(&[], Bool), sa(&[], Bool), sa(&[], Bool)], sa(&[], Bool), false);
}

#[test]
fn convert_all_pairs() {
    let dts = [Bool, I8, I32, I64, U8, U32, F16, BF16, F32, F64];
    for &from in &dts {
        let vals: Vec<f64> = match from {
            Bool => vec![0.0, 1.0, 1.0, 0.0],
            U8 => vec![0.0, 7.0, 200.0, 255.0],
            U32 => vec![0.0, 7.0, 3e9, 70000.0],
            I8 => vec![-128.0, -1.0, 0.0, 127.0],
            I32 | I64 => vec![-70000.0, -1.0, 0.0, 3000.0],
            F16 | BF16 => vec![-2.5, 0.0, 1.75, 300.0],
            _ => vec![-2.75, 0.0, 0.5, 1e10, -1e10, f64::NAN, f64::INFINITY, 255.5],
        };
        let a = sa(&[vals.len()], from);
        for &to in &dts {
            let p = P::ConvertElementType { new_dtype: to, weak_type: false };
            check_vals(p, &[(a.clone(), vals.clone())], sa(&[vals.len()], to));
        }
    }
}

fn bcast(shape: &[usize], bd: &[usize]) -> Primitive {
    P::BroadcastInDim { shape: shape.to_vec(), broadcast_dimensions: bd.to_vec() }
}

#[test]
fn broadcast_reshape_transpose_iota() {
    check(bcast(&[2, 3], &[1]), &[sa(&[3], F32)], sa(&[2, 3], F32), false);
    check(bcast(&[3, 4], &[0, 1]), &[sa(&[3, 1], F32)], sa(&[3, 4], F32), false);
    check(bcast(&[2, 2], &[]), &[sa(&[], I32)], sa(&[2, 2], I32), false);
    check(bcast(&[3, 2, 4], &[1]), &[sa(&[2], I64)], sa(&[3, 2, 4], I64), false);
    check(bcast(&[2, 3, 5], &[1, 2]), &[sa(&[3, 1], Bool)], sa(&[2, 3, 5], Bool), false);
    check(bcast(&[1, 4], &[0, 1]), &[sa(&[1, 4], F32)], sa(&[1, 4], F32), false);
    let rs = |s: &[usize]| P::Reshape { new_sizes: s.to_vec() };
    check(rs(&[3, 2]), &[sa(&[2, 3], F32)], sa(&[3, 2], F32), false);
    check(rs(&[6, 4]), &[sa(&[2, 3, 4], I32)], sa(&[6, 4], I32), false);
    check(rs(&[2, 3]), &[sa(&[6], F32)], sa(&[2, 3], F32), false);
    check(rs(&[1, 1]), &[sa(&[], F32)], sa(&[1, 1], F32), false);
    check(rs(&[]), &[sa(&[1, 1], F32)], sa(&[], F32), false);
    check(rs(&[4, 1]), &[sa(&[4], U8)], sa(&[4, 1], U8), false);
    check(rs(&[6]), &[sa(&[2, 3], Bool)], sa(&[6], Bool), false);
    let tp = |p: &[usize]| P::Transpose { permutation: p.to_vec() };
    check(tp(&[1, 0]), &[sa(&[2, 3], F32)], sa(&[3, 2], F32), false);
    check(tp(&[2, 0, 1]), &[sa(&[2, 3, 4], F32)], sa(&[4, 2, 3], F32), false);
    check(tp(&[1, 2, 0]), &[sa(&[2, 1, 3], I64)], sa(&[1, 3, 2], I64), false);
    check(tp(&[]), &[sa(&[], F32)], sa(&[], F32), false);
    let iota = |d: DType, s: &[usize], dim: usize| P::Iota { dtype: d, shape: s.to_vec(), dimension: dim };
    check(iota(I32, &[5], 0), &[], sa(&[5], I32), false);
    check(iota(F32, &[2, 3], 1), &[], sa(&[2, 3], F32), false);
    check(iota(I64, &[3, 2, 2], 0), &[], sa(&[3, 2, 2], I64), false);
    check(iota(U8, &[4], 0), &[], sa(&[4], U8), false);
    check(iota(BF16, &[3], 0), &[], sa(&[3], BF16), false);
}

#[test]
fn reductions() {
    let sum = |a: &[usize]| P::ReduceSum { axes: a.to_vec() };
    let max = |a: &[usize]| P::ReduceMax { axes: a.to_vec() };
    let min = |a: &[usize]| P::ReduceMin { axes: a.to_vec() };
    check(sum(&[1]), &[sa(&[3, 4], F32)], sa(&[3], F32), false);
    check(sum(&[0, 2]), &[sa(&[2, 3, 4], F32)], sa(&[3], F32), false);
    check(sum(&[0, 1, 2]), &[sa(&[2, 3, 4], F64)], sa(&[], F64), false);
    check(max(&[2, 0]), &[sa(&[2, 3, 4], F32)], sa(&[3], F32), false);
    check(min(&[0]), &[sa(&[5, 2], I32)], sa(&[2], I32), false);
    check(max(&[1]), &[sa(&[2, 5], U32)], sa(&[2], U32), false);
    check(sum(&[0]), &[sa(&[7], I64)], sa(&[], I64), false);
    check(max(&[0]), &[sa(&[6, 2], Bool)], sa(&[2], Bool), false);
    check(min(&[1]), &[sa(&[2, 6], Bool)], sa(&[2], Bool), false);
    check(sum(&[0]), &[sa(&[8], BF16)], sa(&[], BF16), false);
    check(sum(&[]), &[sa(&[3], F32)], sa(&[3], F32), false);
    check_vals(max(&[0]), &[(sa(&[3], F32), vec![1.0, f64::NAN, 2.0])], sa(&[], F32));
    // Reducing an empty dimension gives the init value.
    check(sum(&[0]), &[sa(&[0, 3], F32)], sa(&[3], F32), false);
    check(max(&[1]), &[sa(&[2, 0], F32)], sa(&[2], F32), false);
    check(min(&[1]), &[sa(&[2, 0], I32)], sa(&[2], I32), false);
}

fn dot(lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]) -> Primitive {
    P::DotGeneral {
        lhs_contracting: lc.to_vec(),
        rhs_contracting: rc.to_vec(),
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
        precision: None,
        preferred_element_type: None,
        out_sharding: None,
    }
}

#[test]
fn dot_general() {
    check(dot(&[1], &[0], &[], &[]), &[sa(&[4, 5], F32), sa(&[5, 3], F32)], sa(&[4, 3], F32), false);
    check(dot(&[2], &[1], &[0], &[0]), &[sa(&[2, 3, 4], F32), sa(&[2, 4, 5], F32)], sa(&[2, 3, 5], F32), false);
    check(dot(&[0], &[0], &[], &[]), &[sa(&[5, 3], F32), sa(&[5, 4], F32)], sa(&[3, 4], F32), false);
    check(dot(&[2], &[0], &[1], &[1]), &[sa(&[3, 2, 4], F32), sa(&[4, 2, 5], F32)], sa(&[2, 3, 5], F32), false);
    check(dot(&[0], &[0], &[], &[]), &[sa(&[5], F64), sa(&[5], F64)], sa(&[], F64), false);
    check(dot(&[], &[], &[], &[]), &[sa(&[3], F32), sa(&[4], F32)], sa(&[3, 4], F32), false);
    check(dot(&[1, 2], &[0, 1], &[], &[]), &[sa(&[2, 3, 4], F32), sa(&[3, 4, 5], F32)], sa(&[2, 5], F32), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[3, 4], I32), sa(&[4, 2], I32)], sa(&[3, 2], I32), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[3, 4], I8), sa(&[4, 2], I8)], sa(&[3, 2], I32), false);
    check(dot(&[2], &[2], &[0], &[0]), &[sa(&[2, 3, 4], BF16), sa(&[2, 5, 4], BF16)], sa(&[2, 3, 5], F32), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[3, 4], BF16), sa(&[4, 2], BF16)], sa(&[3, 2], BF16), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[3, 0], F32), sa(&[0, 4], F32)], sa(&[3, 4], F32), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[2, 3], Bool), sa(&[3, 2], Bool)], sa(&[2, 2], Bool), false);
}

#[test]
fn empty_arrays() {
    check(P::Add, &[sa(&[0, 3], F32), sa(&[0, 3], F32)], sa(&[0, 3], F32), false);
    check(P::Sin, &[sa(&[0], F32)], sa(&[0], F32), false);
    check(P::ReduceSum { axes: vec![1] }, &[sa(&[0, 3], F32)], sa(&[0], F32), false);
    check(bcast(&[0, 2], &[1]), &[sa(&[2], F32)], sa(&[0, 2], F32), false);
    check(P::Transpose { permutation: vec![1, 0] }, &[sa(&[0, 3], I32)], sa(&[3, 0], I32), false);
    check(P::Reshape { new_sizes: vec![3, 0] }, &[sa(&[0, 3], I32)], sa(&[3, 0], I32), false);
    check(dot(&[1], &[0], &[], &[]), &[sa(&[0, 4], F32), sa(&[4, 2], F32)], sa(&[0, 2], F32), false);
}
