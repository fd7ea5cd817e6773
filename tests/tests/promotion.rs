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
    assert_eq!(
        promotion::x64_truncation_warning(DType::F64, "zeros"),
        "UserWarning: Explicitly requested dtype float64 requested in zeros is not available, and will be truncated to dtype float32. \
         To enable more dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell environment variable. \
         See https://github.com/jax-ml/jax#current-gotchas for more."
    );
    assert_eq!(promotion::check_user_dtype_supported(DType::I64, "arange"), DType::I32);
    assert_eq!(promotion::check_user_dtype_supported(DType::BF16, "arange"), DType::BF16);
}
