//! One harness over every primitive (issue 3's test matrix), in f64 with
//! `jax_enable_x64` on (so this file is its own process). For each case `f: f64[12] -> _`:
//! - eager against `jit` (and against an f64 reference for the elementwise ones),
//! - `jit(vmap(f))` on 3 stacked inputs against `f` on each,
//! - for differentiable cases: `grad` of a weighted sum against central finite
//!   differences, its jvp along a direction against the same differences, and jvp
//!   against the vjp transposition (`<u, J t> == <J^T u, t>`).
//!
//! The other test files check the primitives' details (parameters, edge cases, errors);
//! this one makes sure no primitive misses one of the four checks.

use jax::ir::{CumOp, GatherDims, GatherMode, Primitive, ScatterDims, ScatterOp, WindowOp};
use jax::prelude::*;
use jax::s;
use jax::trace::Operand;

const X12: [f64; 12] = [0.31, -1.23, 0.72, 2.14, -0.41, 1.63, 0.93, -0.82, 1.17, 0.26, -1.71, 0.57];
/// Positive inputs (log, sqrt, pow's base).
const POS: [f64; 12] = [0.31, 1.23, 0.72, 2.14, 0.41, 1.63, 0.93, 0.82, 1.17, 0.26, 1.71, 0.57];
/// Inputs in (-1, 1) (erf_inv).
const UNIT: [f64; 12] = [0.31, -0.63, 0.72, 0.14, -0.41, 0.53, 0.23, -0.82, 0.17, 0.26, -0.71, 0.57];

type F = fn(Array) -> Array;

#[derive(Clone, Copy, PartialEq)]
enum Ad {
    /// grad vs finite differences and jvp vs vjp.
    Both,
    /// No derivative checks (integer/bool results, or piecewise-constant with zero derivative
    /// checked elsewhere).
    None,
    /// Reverse mode only: forward mode is an error by design (custom_vjp).
    VjpOnly,
    /// Forward mode only: reverse mode is an error by design (while_loop, as in JAX).
    JvpOnly,
}

struct Case {
    name: &'static str,
    f: F,
    input: &'static [f64; 12],
    reference: Option<fn(f64) -> f64>,
    ad: Ad,
}

fn case(name: &'static str, f: F) -> Case {
    Case { name, f, input: &X12, reference: None, ad: Ad::Both }
}

impl Case {
    fn on(self, input: &'static [f64; 12]) -> Case {
        Case { input, ..self }
    }
    fn reference(self, r: fn(f64) -> f64) -> Case {
        Case { reference: Some(r), ..self }
    }
    fn ad(self, ad: Ad) -> Case {
        Case { ad, ..self }
    }
}

fn un(p: Primitive, x: &Array) -> Array {
    lax::unary_prim(p, x).unwrap()
}

fn bin(p: Primitive, x: &Array, y: &Array) -> Array {
    lax::binary(p, Operand::Array(x.clone()), Operand::Array(y.clone())).unwrap()
}

/// A second operand that depends on `x` (reversed, scaled, positive), so derivatives flow
/// to both sides of binary primitives.
fn other(x: &Array) -> Array {
    lax::rev(x, &[0]).unwrap() * 0.7 + 1.3
}

fn ints(v: &[i32]) -> Array {
    Array::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn m34(x: &Array) -> Array {
    x.reshape(&[3, 4])
}

fn cases() -> Vec<Case> {
    use Primitive as P;
    vec![
        // -- elementwise unary, against f64 --
        case("neg", |x| un(P::Neg, &x)).reference(|v| -v),
        case("exp", |x| un(P::Exp, &x)).reference(f64::exp),
        case("log", |x| un(P::Log, &x)).on(&POS).reference(f64::ln),
        case("sin", |x| un(P::Sin, &x)).reference(f64::sin),
        case("cos", |x| un(P::Cos, &x)).reference(f64::cos),
        case("tanh", |x| un(P::Tanh, &x)).reference(f64::tanh),
        case("sqrt", |x| un(P::Sqrt, &x)).on(&POS).reference(f64::sqrt),
        case("abs", |x| un(P::Abs, &x)).reference(f64::abs),
        case("sign", |x| un(P::Sign, &x)).reference(f64::signum),
        case("floor", |x| un(P::Floor, &x)).reference(f64::floor),
        case("ceil", |x| un(P::Ceil, &x)).reference(f64::ceil),
        case("round", |x| lax::round(&x, 0).unwrap()).reference(f64::round),
        case("log1p", |x| un(P::Log1p, &x)).on(&POS).reference(f64::ln_1p),
        case("expm1", |x| un(P::Expm1, &x)).reference(f64::exp_m1),
        case("logistic", |x| un(P::Logistic, &x)).reference(|v| 1.0 / (1.0 + (-v).exp())),
        case("erf", |x| un(P::Erf, &x)),
        case("erf_inv", |x| un(P::ErfInv, &x)).on(&UNIT),
        case("integer_pow", |x| lax::integer_pow(&x, 3).unwrap()).reference(|v| v * v * v),
        case("is_finite", |x| un(P::IsFinite, &(&x / &(&x - 0.26)))).reference(|v| (v != 0.26) as i32 as f64).ad(Ad::None),
        case("reduce_precision", |x| lax::reduce_precision(&x, 11, 52).unwrap()).reference(|v| v),
        // Through float32: finite differences of f32 rounding say nothing, so no derivative checks.
        case("convert_element_type", |x| lax::convert_element_type(&lax::convert_element_type(&x, DType::F32).unwrap(), DType::F64).unwrap())
            .reference(|v| v as f32 as f64)
            .ad(Ad::None),
        // The stopped terms cancel in value, so finite differences see what AD should: 2x.
        case("stop_gradient", |x| &x * &x + stop_gradient(&x) - stop_gradient(&x)).reference(|v| v * v),
        // -- elementwise binary (second operand `other(x)`) --
        case("add", |x| bin(P::Add, &x, &other(&x))),
        case("add_any", |x| bin(P::AddAny, &x, &other(&x))),
        case("sub", |x| bin(P::Sub, &x, &other(&x))),
        case("mul", |x| bin(P::Mul, &x, &other(&x))),
        case("div", |x| bin(P::Div, &x, &other(&x))),
        case("rem", |x| bin(P::Rem, &(&x * 3.0), &other(&x))),
        case("pow", |x| bin(P::Pow, &x, &other(&x))).on(&POS),
        case("max", |x| bin(P::Max, &x, &other(&x))),
        case("min", |x| bin(P::Min, &x, &other(&x))),
        case("nextafter", |x| bin(P::NextAfter, &x, &other(&x))).ad(Ad::None),
        case("comparisons", |x| {
            let y = other(&x) - 1.3;
            let c = |p: P, k: f64| bin(p, &x, &y).astype(DType::F64) * k;
            c(P::Eq, 1.0) + c(P::Ne, 2.0) + c(P::Lt, 4.0) + c(P::Le, 8.0) + c(P::Gt, 16.0) + c(P::Ge, 32.0)
        })
        .ad(Ad::None),
        case("and/or/xor/not", |x| {
            let (a, b) = (x.gt(0.0), other(&x).gt(1.8));
            let c = |p: P, k: f64| bin(p, &a, &b).astype(DType::F64) * k;
            c(P::And, 1.0) + c(P::Or, 2.0) + c(P::Xor, 4.0) + un(P::Not, &a).astype(DType::F64) * 8.0
        })
        .ad(Ad::None),
        case("shifts/bitcast", |x| {
            let i = (&x * 100.0).astype(DType::I32);
            let c = |p: P| bin(p, &i, &Array::scalar(2i32)).astype(DType::F64);
            let b = lax::bind1(P::BitcastConvertType { new_dtype: DType::U32 }, vec![Operand::Array(i.clone())]).unwrap();
            c(P::ShiftLeft) + c(P::ShiftRightLogical) + c(P::ShiftRightArithmetic) + b.astype(DType::F64)
        })
        .ad(Ad::None),
        case("select_n", |x| lax::select_n(&x.gt(0.5), &[x.sin(), &x * &x]).unwrap()),
        // -- shapes --
        case("broadcast_in_dim", |x| lax::broadcast_to(&x, &[2, 12]).unwrap() * 2.0),
        case("reshape/transpose", |x| lax::transpose(&lax::reshape(&x, &[3, 4]).unwrap(), &[1, 0]).unwrap()),
        case("iota", |x| &x * &lax::iota(DType::F64, &[12], 0).unwrap()),
        case("concatenate", |x| lax::concatenate(&[x.clone(), x.sin()], 0).unwrap()),
        case("pad", |x| lax::pad(&m34(&x), 0.5, &[(1, -1, 1), (0, 2, 0)]).unwrap()),
        case("rev", |x| lax::rev(&m34(&x), &[0, 1]).unwrap()),
        case("squeeze", |x| lax::squeeze(&x.reshape(&[1, 12]), &[0]).unwrap()),
        case("slice", |x| lax::slice(&m34(&x), &[1, 0], &[3, 4], Some(&[1, 2])).unwrap()),
        case("dynamic_slice", |x| lax::dynamic_slice(&m34(&x), &[Array::scalar(1i32), Array::scalar(2i32)], &[2, 2]).unwrap()),
        case("dynamic_update_slice", |x| {
            let m = m34(&x);
            lax::dynamic_update_slice(&m, &m.index(s![0..1, 0..2]).sin(), &[Array::scalar(2i32), Array::scalar(1i32)]).unwrap()
        }),
        case("split", |x| {
            let p = lax::split(&x, &[5, 7], 0).unwrap();
            lax::concatenate(&[&p[1] * 2.0, p[0].clone()], 0).unwrap()
        }),
        // -- reductions and scans --
        case("reduce_sum", |x| jnp::sum(&m34(&x), Some(&[1])).unwrap()),
        case("reduce_max", |x| jnp::max(&m34(&x), Some(&[0])).unwrap()),
        case("reduce_min", |x| jnp::min(&m34(&x), Some(&[1])).unwrap()),
        case("reduce_prod", |x| jnp::prod(&m34(&x), Some(&[0])).unwrap()),
        case("reduce_and/or", |x| {
            let b = m34(&x).gt(0.0);
            jnp::all(&b, Some(&[1])).unwrap().astype(DType::F64) + jnp::any(&b, Some(&[0])).unwrap().astype(DType::F64).sum()
        })
        .ad(Ad::None),
        case("argmax/argmin", |x| lax::argminmax(true, &m34(&x), 1, DType::I32).unwrap() * 10 + lax::argminmax(false, &m34(&x), 1, DType::I32).unwrap()).ad(Ad::None),
        case("cumsum", |x| lax::cumulative(CumOp::Sum, &m34(&x), 1, false).unwrap()),
        case("cumprod", |x| lax::cumulative(CumOp::Prod, &m34(&x), 0, true).unwrap()),
        case("cummax", |x| lax::cumulative(CumOp::Max, &x, 0, false).unwrap()),
        case("cummin", |x| lax::cumulative(CumOp::Min, &m34(&x), 1, true).unwrap()),
        case("sort", |x| lax::sort(&[x.cos(), x.clone()], 0, 1).unwrap()[1].clone()),
        case("top_k", |x| lax::top_k(&m34(&x), 2).unwrap().0),
        case("reduce_window sum", |x| lax::reduce_window(WindowOp::Sum, &m34(&x), &[2, 2], &[1, 2], &[(0, 1), (1, 0)]).unwrap()),
        case("reduce_window max", |x| lax::reduce_window(WindowOp::Max, &m34(&x), &[2, 3], &[1, 1], &[(0, 0), (1, 1)]).unwrap()),
        case("reduce_window min", |x| lax::reduce_window(WindowOp::Min, &m34(&x), &[3, 2], &[1, 2], &[(0, 0), (0, 0)]).unwrap()),
        // -- contractions --
        case("dot_general", |x| {
            let m = m34(&x);
            lax::dot_general(&m, &m.sin(), (&[1], &[1]), (&[], &[]), None).unwrap()
        }),
        case("conv_general_dilated", |x| {
            let l = x.reshape(&[1, 2, 6]);
            let r = x.index(s![3..9]).reshape(&[1, 2, 3]);
            lax::conv_general_dilated(&l, &r, &[2], &[(1, 1)], None, Some(&[2]), None, 1).unwrap()
        }),
        // -- gather / scatter --
        case("gather", |x| {
            let dn = GatherDims { offset_dims: vec![1], collapsed_slice_dims: vec![0], start_index_map: vec![0, 1], ..Default::default() };
            lax::gather(&m34(&x), &Array::from_vec(vec![1i32, 1, 0, 2, 2, 0], &[3, 2]).unwrap(), dn, &[1, 2], GatherMode::Clip).unwrap()
        }),
        case("scatter", |x| x.at(s![&ints(&[1, 7, 3])]).set(&x.index(s![0..3]).sin()).unwrap()),
        case("scatter-add", |x| x.at(s![&ints(&[1, 7, 1])]).add(&(x.index(s![0..3]) * 3.0)).unwrap()),
        case("scatter-mul", |x| x.at(s![&ints(&[2, 5, 9])]).mul(&x.index(s![3..6]).cos()).unwrap()),
        case("scatter-min", |x| x.at(s![&ints(&[2, 4, 9])]).min(&(x.index(s![3..6]) * 0.5)).unwrap()),
        case("scatter-max", |x| {
            let dn = ScatterDims { update_window_dims: vec![], inserted_window_dims: vec![0], scatter_dims_to_operand_dims: vec![0], ..Default::default() };
            lax::scatter(ScatterOp::Max, &x, &Array::from_vec(vec![3i32, 8], &[2, 1]).unwrap(), &(x.index(s![0..2]) * 2.0), dn, GatherMode::FillOrDrop).unwrap()
        }),
        // -- control flow and call-like primitives --
        case("cond", |x| lax::cond(&x.sum().gt(0.0), |x: Array| x.sin(), |x: Array| &x * &x, x).unwrap()),
        case("fori_loop", |x| lax::fori_loop(0, 3, |(_, c): (Array, Array)| c.sin() * 1.5, x).unwrap()),
        case("while", |x| {
            let body = |(i, c): (Array, Array)| (i + 1, c.sin() * 1.5);
            lax::while_loop(|(i, _): (Array, Array)| i.lt(3), body, (Array::scalar(0i32), x)).unwrap().1
        })
        .ad(Ad::JvpOnly),
        case("scan", |x| {
            let step = |(c, r): (Array, Array)| -> Result<(Array, Array)> { Ok((&c * &r, c.sin() + &r)) };
            lax::scan(step, jnp::ones(&[4], DType::F64), m34(&x), None, false, 1).unwrap().1
        }),
        case("custom_jvp_call", |x| {
            let f = custom_jvp(|x: Array| x.sin(), |x: Array, t: Array| -> Result<(Array, Array)> { Ok((x.sin(), x.cos() * t)) });
            f(x).unwrap()
        }),
        case("custom_vjp_call", |x| {
            let f = custom_vjp(|x: Array| x.sin(), |x: Array| -> Result<(Array, Array)> { Ok((x.sin(), x.cos())) }, |c: Array, g: Array| -> Result<Array> { Ok(c * g) });
            f(x).unwrap()
        })
        .ad(Ad::VjpOnly),
        case("checkpoint", |x| checkpoint(|x: Array| x.tanh().sin())(x).unwrap()),
    ]
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || (g - w).abs() <= tol * (1.0 + w.abs()))
}

/// Fixed uneven weights: Σ w ⊙ f(x) is the scalar the gradient checks differentiate.
fn weights(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|i| 0.3 + 0.7 * ((i as f64) * 1.37).sin()).collect::<Vec<f64>>(), shape).unwrap()
}

/// The failures of one case (empty when it passes every check).
fn check(c: &Case) -> Vec<String> {
    let mut bad = vec![];
    let f = c.f;
    let x = Array::from_slice(c.input);
    let jf = jit(f);
    let eager = f64s(&f(x.clone()));
    let compiled = f64s(&jf.call(&x).unwrap());
    if !close(&compiled, &eager, 1e-12) {
        bad.push(format!("jit {compiled:?} != eager {eager:?}"));
    }
    if let Some(r) = c.reference {
        let want: Vec<f64> = c.input.iter().map(|&v| r(v)).collect();
        if !close(&eager, &want, 1e-12) {
            bad.push(format!("eager {eager:?} != reference {want:?}"));
        }
    }
    // vmap over 3 inputs vs a loop.
    let rows: Vec<Vec<f64>> = [1.0, 0.9, 0.8].iter().map(|k| c.input.iter().map(|v| v * k).collect()).collect();
    let stacked = Array::from_vec(rows.concat(), &[3, 12]).unwrap();
    let looped: Vec<f64> = rows.iter().flat_map(|r| f64s(&jf.call(Array::from_slice(r)).unwrap())).collect();
    match jit(vmap(f)).call(&stacked) {
        Ok(v) if close(&f64s(&v), &looped, 1e-12) => {}
        Ok(v) => bad.push(format!("vmap {:?} != loop {looped:?}", f64s(&v))),
        Err(e) => bad.push(format!("vmap failed: {e}")),
    }
    if c.ad != Ad::None {
        bad.extend(check_derivatives(c));
    }
    bad
}

fn check_derivatives(c: &Case) -> Vec<String> {
    let mut bad = vec![];
    let f = c.f;
    let x = Array::from_slice(c.input);
    let wsum = move |x: Array| {
        let y = f(x);
        (&y * &weights(&y.shape())).sum()
    };
    let jw = jit(wsum);
    let h = 1e-6;
    let fd: Vec<f64> = (0..12)
        .map(|i| {
            let (mut a, mut b) = (c.input.to_vec(), c.input.to_vec());
            a[i] += h;
            b[i] -= h;
            let at = |v: Vec<f64>| jw.call(Array::from_slice(&v)).unwrap().item::<f64>().unwrap();
            (at(a) - at(b)) / (2.0 * h)
        })
        .collect();
    let t: Vec<f64> = (0..12).map(|i| ((i as f64) * 0.77).cos()).collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    if c.ad != Ad::JvpOnly {
        match jit(grad(wsum)).call(&x) {
            Ok(g) if close(&f64s(&g), &fd, 1e-5) => {}
            Ok(g) => bad.push(format!("grad {:?} != finite differences {fd:?}", f64s(&g))),
            Err(e) => bad.push(format!("grad failed: {e}")),
        }
    }
    if c.ad == Ad::VjpOnly {
        return bad;
    }
    let (y, jt) = match jit(move |(x, t): (Array, Array)| jvp(f, &x, &t)).call((&x, &Array::from_slice(&t))) {
        Ok(r) => r,
        Err(e) => return vec![format!("jvp failed: {e}")],
    };
    let u = weights(&y.shape());
    // The directional derivative of Σ w ⊙ f along t, from the jvp and from the differences.
    let (along, want) = (dot(&f64s(&u), &f64s(&jt)), dot(&fd, &t));
    if (along - want).abs() > 1e-5 * (1.0 + want.abs()) {
        bad.push(format!("jvp along t {along} != finite differences {want}"));
    }
    if c.ad == Ad::JvpOnly {
        return bad;
    }
    match jit(move |(x, u): (Array, Array)| vjp(f, &x, &u)).call((&x, &u)) {
        Ok((_, vu)) if (along - dot(&f64s(&vu), &t)).abs() <= 1e-9 * (1.0 + along.abs()) => {}
        Ok((_, vu)) => bad.push(format!("<u, J t> = {along} but <J^T u, t> = {}", dot(&f64s(&vu), &t))),
        Err(e) => bad.push(format!("vjp failed: {e}")),
    }
    bad
}

#[test]
fn every_primitive_eager_jit_vmap_and_derivatives() {
    config::update("jax_enable_x64", true).unwrap();
    let failures: Vec<String> = cases()
        .iter()
        .flat_map(|c| check(c).into_iter().map(move |m| format!("{}: {m}", c.name)))
        .collect();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Every primitive that takes array operands appears in `cases()` (by the names of the
/// jaxprs it stages), except the ones that have no values to compare.
#[test]
fn every_primitive_is_covered() {
    config::update("jax_enable_x64", true).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for c in cases() {
        let text = make_jaxpr(c.f, Array::from_slice(c.input)).unwrap().to_string();
        for part in text.split(" = ").skip(1) {
            seen.insert(part.chars().take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_' || *ch == '-').collect::<String>());
        }
    }
    let all = "neg exp log sin cos tanh sqrt abs not add sub mul div rem pow max min and or eq ne lt le gt ge select_n add_any \
        convert_element_type broadcast_in_dim reshape transpose iota reduce_sum reduce_max reduce_min dot_general stop_gradient \
        cond while scan custom_jvp_call custom_vjp_call remat2 shift_left shift_right_logical shift_right_arithmetic \
        bitcast_convert_type erf_inv nextafter sign floor ceil round is_finite log1p expm1 logistic erf integer_pow xor \
        reduce_precision reduce_prod reduce_and reduce_or argmax argmin cumsum cumprod cummax cummin concatenate pad rev \
        squeeze slice dynamic_slice dynamic_update_slice split gather scatter scatter-add scatter-mul scatter-min scatter-max \
        sort top_k conv_general_dilated reduce_window_sum reduce_window_max reduce_window_min";
    // Not here: debug_callback (an effect, tested in the REPL tests) and jit (nested jit is inlined).
    let missing: Vec<&str> = all.split_whitespace().filter(|p| !seen.contains(*p)).collect();
    assert!(missing.is_empty(), "primitives without a case: {missing:?}");
}
