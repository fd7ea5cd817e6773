//! Op metadata (JAX 201 "controlling XLA", `jax.experimental.xla_metadata`):
//! `set_xla_metadata` / `xla_metadata_call` attach key/value pairs to the equations traced
//! inside them, and lowering writes them on those ops as `mhlo.frontend_attributes` (the
//! metadata of each op's fused location). JAX 0.11.1 shows the same function's HLO with
//! `frontend_attributes={tag="my_block"}` on the tagged computation.

use expect_test::expect;
use jax::prelude::*;

/// JAX's example: `sin(x) * cos(x)` tagged, `+ 1` outside.
fn tagged(x: Array) -> Array {
    set_xla_metadata(&[("tag", "my_block")], || x.sin() * x.cos()) + 1.0
}

#[test]
fn set_xla_metadata_tags_the_lowered_ops() {
    let f = jit(tagged).with_name("f");
    let x = Array::scalar(0.5f32);
    let text = f.lower(&x).unwrap().as_text();
    expect![[r#"
        module @jit_f {
          func.func public @main(%arg0: tensor<f32>) -> (tensor<f32>) {
            %0 = tensor.extract %arg0[] : tensor<f32> loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(f)/sin"])
            %1 = math.sin %0 : f32 loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(f)/sin"])
            %2 = tensor.extract %arg0[] : tensor<f32> loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(f)/cos"])
            %3 = math.cos %2 : f32 loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(f)/cos"])
            %4 = arith.mulf %1, %3 : f32 loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(f)/mul"])
            %5 = arith.constant 1.0 : f32
            %6 = arith.addf %4, %5 : f32
            %7 = tensor.empty() : tensor<f32>
            %8 = linalg.fill ins(%6 : f32) outs(%7 : tensor<f32>) -> tensor<f32>
            return %8 : tensor<f32>
          }
        }
    "#]].assert_eq(&text);
    // The tag is not an equation: the jaxpr is the untagged function's.
    let plain = make_jaxpr(|x: Array| x.sin() * x.cos() + 1.0, &x).unwrap().to_string();
    assert_eq!(make_jaxpr(tagged, &x).unwrap().to_string(), plain);
    // And it compiles and runs like it.
    let got = f.call(&x).unwrap().to_vec::<f64>().unwrap()[0];
    let want = 0.5f32.sin() as f64 * 0.5f32.cos() as f64 + 1.0;
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
}

#[test]
fn nested_scopes_merge_and_values_are_strings() {
    // `breakpoint=True` renders as "true" in JAX; inner keys override outer ones; keys
    // that are not identifiers are quoted.
    let g = jit(|x: Array| {
        set_xla_metadata(&[("tag", "outer"), ("breakpoint", "true")], || {
            let y = x.sin();
            set_xla_metadata(&[("tag", "inner"), ("my key", "a\"b")], || y * 2.0)
        })
    })
    .with_name("g");
    let x = Array::scalar(1.0f32);
    let text = g.lower(&x).unwrap().as_text();
    let sin = text.lines().find(|l| l.contains("= math.sin ")).expect("a sin");
    assert!(sin.ends_with(r#": f32 loc(fused<{mhlo.frontend_attributes = {breakpoint = "true", tag = "outer"}}>["jit(g)/sin"])"#), "{text}");
    assert!(text.contains(r#"loc(fused<{mhlo.frontend_attributes = {breakpoint = "true", "my key" = "a\"b", tag = "inner"}}>["jit(g)/mul"])"#), "{text}");
    assert!((g.call(&x).unwrap().to_vec::<f64>().unwrap()[0] - 2.0 * 1f32.sin() as f64).abs() < 1e-6);
}

#[test]
fn xla_metadata_call_wraps_a_function_and_composes_with_named_scope() {
    let body = xla_metadata_call(&[("tag", "my_block")], |x: Array| named_scope("blk", || x.sin()));
    let h = jit(move |x: Array| body(x) * 3.0).with_name("h");
    let x = Array::scalar(0.25f32);
    let text = h.lower(&x).unwrap().as_text();
    assert!(text.contains(r#"loc(fused<{mhlo.frontend_attributes = {tag = "my_block"}}>["jit(h)/blk/sin"])"#), "{text}");
    // The multiply is outside: no metadata, no location.
    let mul = text.lines().find(|l| l.contains("arith.mulf")).expect("a mulf");
    assert!(!mul.contains("loc("), "{mul}");
    assert!((h.call(&x).unwrap().to_vec::<f64>().unwrap()[0] - 3.0 * 0.25f32.sin() as f64).abs() < 1e-6);
}

#[test]
fn the_open_scope_is_part_of_the_trace_cache_key() {
    // As in JAX: calling a jitted function inside a new metadata scope retraces, so its
    // ops carry the scope's pairs; outside again, the untagged trace is reused.
    let f = jit(|x: Array| x.sin()).with_name("k");
    let x = Array::scalar(0.5f32);
    assert!(!f.lower(&x).unwrap().as_text().contains("frontend_attributes"));
    let tagged = set_xla_metadata(&[("tag", "late")], || f.lower(&x).unwrap().as_text());
    assert!(tagged.contains(r#"loc(fused<{mhlo.frontend_attributes = {tag = "late"}}>["jit(k)/sin"])"#), "{tagged}");
    assert!(!f.lower(&x).unwrap().as_text().contains("frontend_attributes"));
}
