//! JAX's type promotion lattice against the table captured from jax 0.10.2
//! (tests/data/promotion_reference.json, made by tests/data/promotion_reference.py):
//! `promote_types` for every strong pair, and the dtype and weak type of `x + y` for every
//! pair of {bool, u8, u32, i8, i16, i32, i64, bf16, f16, f32, f64, i* (Rust int literal),
//! f* (Rust float literal)}, with `jax_enable_x64` off (the lattice canonicalized, and
//! real eager `add`s) and on (the lattice itself).

use jax::ir::{DType, Scalar, ShapedArray};
use jax::lax::{self, promotion};
use jax::prelude::*;
use jax::trace::Operand;
use serde_json::Value;

fn table() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/promotion_reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// (dtype, weak) of an operand name; weak literals are 32-bit with x64 off, 64-bit with it on.
fn operand(name: &str, x64: bool) -> (DType, bool) {
    match name {
        "i*" => (if x64 { DType::I64 } else { DType::I32 }, true),
        "f*" => (if x64 { DType::F64 } else { DType::F32 }, true),
        n => (DType::parse(n).unwrap(), false),
    }
}

fn rows(t: &Value, mode: &str) -> Vec<(String, String, String, bool, Option<String>)> {
    t[mode]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["a"].as_str().unwrap().to_string(),
                r["b"].as_str().unwrap().to_string(),
                r["dtype"].as_str().unwrap().to_string(),
                r["weak_type"].as_bool().unwrap(),
                r.get("promote_types").map(|p| p.as_str().unwrap().to_string()),
            )
        })
        .collect()
}

#[test]
fn lattice_matches_jax_with_x64_on() {
    let t = table();
    assert_eq!(t["x64_on"]["jax_version"], "0.10.2");
    let rs = rows(&t, "x64_on");
    assert_eq!(rs.len(), 13 * 13);
    for (a, b, dtype, weak, pt) in rs {
        let got = promotion::promote_lattice(operand(&a, true), operand(&b, true));
        assert_eq!((got.0.name(), got.1), (dtype.as_str(), weak), "{a} + {b} (x64 on)");
        if let Some(pt) = pt {
            let s = promotion::promote_lattice(operand(&a, true), operand(&b, true)).0;
            assert_eq!(s.name(), pt, "promote_types({a}, {b}) (x64 on)");
        }
    }
}

#[test]
fn promote_matches_jax_with_x64_off() {
    let t = table();
    let rs = rows(&t, "x64_off");
    assert_eq!(rs.len(), 11 * 11);
    for (a, b, dtype, weak, pt) in rs {
        let (da, wa) = operand(&a, false);
        let (db, wb) = operand(&b, false);
        let sa = ShapedArray { shape: vec![], dtype: da, weak_type: wa };
        let sb = ShapedArray { shape: vec![], dtype: db, weak_type: wb };
        let got = lax::promote(&sa, &sb);
        assert_eq!((got.0.name(), got.1), (dtype.as_str(), weak), "{a} + {b}");
        if let Some(pt) = pt {
            assert_eq!(lax::promote_types(da, db).name(), pt, "promote_types({a}, {b})");
        }
    }
    // promote_types canonicalizes 64-bit results, as JAX's does with x64 off
    assert_eq!(lax::promote_types(DType::U32, DType::I32), DType::I32);
    assert_eq!(lax::promote_types(DType::I64, DType::F32), DType::F32);
}

fn make(name: &str) -> Operand {
    match name {
        "i*" => lax::literal(Scalar::I32(1)),
        "f*" => lax::literal(Scalar::F64(1.0)),
        n => Operand::Array(jnp::zeros(&[2], DType::parse(n).unwrap())),
    }
}

#[test]
fn eager_add_results_match_jax_with_x64_off() {
    let _log = WARNING_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let t = table();
    for (a, b, dtype, weak, _) in rows(&t, "x64_off") {
        if a.contains('*') && b.contains('*') {
            continue; // two literals: Rust arithmetic, not an array op
        }
        let r = lax::binary(jax::ir::Primitive::Add, make(&a), make(&b)).unwrap();
        assert_eq!((r.dtype().name(), r.weak_type()), (dtype.as_str(), weak), "{a} + {b}");
        assert_eq!(r.to_vec::<f64>().unwrap(), if dtype == "bool" { vec![0.0; 2] } else if a.contains('*') || b.contains('*') { vec![1.0; 2] } else { vec![0.0; 2] }, "{a} + {b} values");
    }
}

#[test]
fn x64_truncation_warning_is_jaxs_text() {
    let _log = WARNING_LOG.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        promotion::x64_truncation_warning(DType::F64, "zeros"),
        "UserWarning: Explicitly requested dtype float64 requested in zeros is not available, and will be truncated to dtype float32. \
         To enable more dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell environment variable. \
         See https://github.com/jax-ml/jax#current-gotchas for more."
    );
    assert_eq!(promotion::check_user_dtype_supported(DType::I64, "arange"), DType::I32);
    assert_eq!(promotion::check_user_dtype_supported(DType::BF16, "arange"), DType::BF16);
}

/// The truncation warnings recorded since `before` that name `fun`.
/// Serialises the tests that issue truncation warnings (creating float64/int64 arrays): the warning log is process-wide and
/// the test harness runs tests on parallel threads, so counts would race.
static WARNING_LOG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn truncations(before: usize, fun: &str) -> Vec<String> {
    let tag = format!("requested in {fun} is");
    jax::transform::jit::warnings_issued()[before..].iter().filter(|w| w.contains(&tag)).cloned().collect()
}

#[test]
fn creation_functions_truncate_64_bit_dtypes_with_jaxs_warning() {
    // jax 0.10.2, x64 off: every creation function given dtype=float64 returns float32 and
    // warns "Explicitly requested dtype float64 requested in <fun> is not available, ...".
    let _log = WARNING_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let x = Array::from_slice(&[1.5f32, 2.5]);
    let before = jax::transform::jit::warnings_issued().len();
    let cases: Vec<(&str, Box<dyn Fn() -> Array>, Vec<f64>)> = vec![
        ("zeros", Box::new(|| jnp::zeros(&[2], DType::F64)), vec![0.0, 0.0]),
        ("ones", Box::new(|| jnp::ones(&[2], DType::F64)), vec![1.0, 1.0]),
        ("full", Box::new(|| jnp::full(&[2], 3.0, DType::F64)), vec![3.0, 3.0]),
        ("empty", Box::new(|| jnp::empty(&[2], DType::F64)), vec![0.0, 0.0]),
        ("arange", Box::new(|| jnp::arange_dtype(0.0, 2.0, 1.0, DType::F64).unwrap()), vec![0.0, 1.0]),
        ("linspace", Box::new(|| jnp::linspace_dtype(0.0, 1.0, 2, DType::F64).unwrap()), vec![0.0, 1.0]),
        ("eye", Box::new(|| jnp::eye(1, None, 0, DType::F64).unwrap()), vec![1.0]),
        ("tri", Box::new(|| jnp::tri(1, None, 0, DType::F64).unwrap()), vec![1.0]),
        ("array", Box::new(|| jnp::array_dtype(&[1.25f64, 2.0], DType::F64).unwrap()), vec![1.25, 2.0]),
        ("asarray", Box::new(|| jnp::asarray(&x, Some(DType::F64)).unwrap()), vec![1.5, 2.5]),
        ("zeros_like", Box::new(|| jnp::zeros_like(&x, Some(DType::F64))), vec![0.0, 0.0]),
        ("ones_like", Box::new(|| jnp::ones_like(&x, Some(DType::F64))), vec![1.0, 1.0]),
        ("full_like", Box::new(|| jnp::full_like(&x, 3, Some(DType::F64))), vec![3.0, 3.0]),
        ("astype", Box::new(|| x.astype(DType::F64)), vec![1.5, 2.5]),
        ("convert_element_type", Box::new(|| lax::convert_element_type(&x, DType::F64).unwrap()), vec![1.5, 2.5]),
    ];
    for (fun, make, want) in &cases {
        for _ in 0..2 {
            let a = make();
            assert_eq!(a.dtype(), DType::F32, "{fun}");
            assert_eq!(a.to_vec::<f64>().unwrap(), *want, "{fun}");
        }
        // Once per call site: the loop ran the same line twice.
        let w = truncations(before, fun);
        assert_eq!(w.len(), 1, "{fun}: {w:?}");
        assert_eq!(
            w[0],
            format!(
                "Explicitly requested dtype float64 requested in {fun} is not available, and will be truncated to dtype float32. \
                 To enable more dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell environment variable. \
                 See https://github.com/jax-ml/jax#current-gotchas for more."
            )
        );
    }
    // A second call site warns again (Python's default filter is per source line).
    let _ = jnp::zeros(&[1], DType::F64);
    assert_eq!(truncations(before, "zeros").len(), 2);
    // int64 becomes int32, and 32-bit or narrower requests never warn.
    let i = jnp::arange_dtype(0.0, 3.0, 1.0, DType::I64).unwrap();
    assert_eq!((i.dtype(), i.to_vec::<i32>().unwrap()), (DType::I32, vec![0, 1, 2]));
    let n = jax::transform::jit::warnings_issued().len();
    let _ = jnp::zeros(&[1], DType::F32);
    let _ = jnp::ones(&[1], DType::BF16);
    let _ = x.astype(DType::I32);
    assert_eq!(jax::transform::jit::warnings_issued().len(), n);
}

#[test]
fn astype_float64_is_the_identity_under_jit_without_x64() {
    // jax 0.10.2: make_jaxpr(lambda x: x.astype(jnp.float64))(jnp.ones(2)) with x64 off
    // is `{ lambda ; a:f32[2]. let  in (a,) }` (and warns).
    let _log = WARNING_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let j = make_jaxpr(|x: Array| x.astype(DType::F64), &jnp::ones(&[2], DType::F32)).unwrap();
    assert_eq!(j.to_string(), "{ lambda ; a:f32[2]. let  in (a,) }");
    let j = make_jaxpr(|x: Array| jnp::zeros(&[2], DType::F64) + x, &jnp::ones(&[2], DType::F32)).unwrap();
    assert!(j.to_string().contains("f32[2]") && !j.to_string().contains("f64"), "{j}");
}

/// The lattice's operands with x64 on: every dtype strong, and the weak int and float.
fn lattice_operands() -> Vec<(DType, bool)> {
    let t = table();
    let names: Vec<String> = rows(&t, "x64_on").into_iter().filter(|r| r.1 == "bool").map(|r| r.0).collect();
    names.iter().map(|n| operand(n, true)).collect()
}

/// Join-semilattice laws of `promote_lattice`, exhaustively over its 13 operands (2197
/// triples: cheaper and stronger than sampling them).
#[test]
fn lattice_is_commutative_associative_and_idempotent() {
    let ops = lattice_operands();
    assert_eq!(ops.len(), 13);
    let p = promotion::promote_lattice;
    for &a in &ops {
        assert_eq!(p(a, a), a, "idempotent {a:?}");
        for &b in &ops {
            assert_eq!(p(a, b), p(b, a), "commutative {a:?} {b:?}");
            for &c in &ops {
                assert_eq!(p(p(a, b), c), p(a, p(b, c)), "associative {a:?} {b:?} {c:?}");
            }
        }
    }
}

mod op_results {
    use super::*;
    use jax::ir::Primitive;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    /// Operands with x64 off: strong arrays of 9 dtypes, then the weak int and float literals.
    const NAMES: [&str; 11] = ["bool", "uint8", "uint32", "int8", "int16", "int32", "bfloat16", "float16", "float32", "i*", "f*"];
    const PRIMS: [Primitive; 4] = [Primitive::Add, Primitive::Mul, Primitive::Max, Primitive::Min];

    fn config() -> Config {
        Config { cases: 64, failure_persistence: None, rng_seed: RngSeed::Fixed(0x7072_6f6d), ..Config::default() }
    }

    proptest! {
        #![proptest_config(config())]

        /// Binary ops (eagerly and under jit) and `where` give `promote`'s dtype and weak type.
        #[test]
        fn result_dtypes_follow_promote(a in 0usize..11, b in 0usize..9, p in 0usize..4) {
            let (x, y) = (make(NAMES[a]), make(NAMES[b]));
            let want = lax::promote(&x.aval(), &y.aval());
            let r = lax::binary(PRIMS[p].clone(), x.clone(), y.clone()).unwrap();
            prop_assert_eq!((r.dtype(), r.weak_type()), want, "{:?}({}, {})", PRIMS[p], NAMES[a], NAMES[b]);
            if let (Operand::Array(xa), Operand::Array(ya)) = (&x, &y) {
                let prim = PRIMS[p].clone();
                let f = jit(move |(u, v): (Array, Array)| lax::binary(prim.clone(), Operand::Array(u), Operand::Array(v)));
                let j = f.call((xa, ya)).unwrap();
                prop_assert_eq!((j.dtype(), j.weak_type()), want, "jit {:?}({}, {})", PRIMS[p], NAMES[a], NAMES[b]);
                let w = jnp::where_(&jnp::zeros(&[2], DType::Bool), xa, ya).unwrap();
                prop_assert_eq!((w.dtype(), w.weak_type()), want, "where({}, {})", NAMES[a], NAMES[b]);
            }
        }
    }
}
