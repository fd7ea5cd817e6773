//! Golden jaxprs of transformations (jvp, vjp, grad, value_and_grad with aux, jacfwd,
//! jacrev, hessian, vmap with in_axes/out_axes, vmap of cond, custom_jvp, custom_vjp,
//! checkpoint, and each under `jit`), following jax 0.10.2.
//!
//! Our text is kept in `tests/data/transform_jaxprs.ours.txt` (expect-test:
//! `UPDATE_EXPECT=1` rewrites it); JAX's for the same functions is in
//! `tests/data/transform_jaxprs.txt`, made by `tests/data/transform_jaxprs.py`, so the two
//! files diff side by side. Beyond the golden text, `structure_matches_jax` checks that the
//! sequence of primitives (nested jaxprs included) equals JAX's, case by case, except for
//! the differences by design listed in `DIFFERENCES`.

use expect_test::expect_file;
use jax::prelude::*;
use jax::trace::pytree::Args;
use jax::transform::jit::TraceOutput;
use std::collections::BTreeMap;

fn x3() -> Array {
    Array::from_slice(&[0.5f32, -1.0, 2.0])
}

fn m23() -> Array {
    jnp::arange(6.0).reshape(&[2, 3])
}

/// `sin(x) * x`, JAX's `f` in the capture script.
fn f(x: Array) -> Array {
    x.sin() * x
}

fn loss(x: Array) -> Array {
    f(x).sum()
}

fn log1pexp() -> impl Fn(Array) -> Result<Array> {
    custom_jvp(
        |x: Array| (x.exp() + 1.0).log(),
        |x: Array, t: Array| -> Result<(Array, Array)> {
            let y = (x.exp() + 1.0).log();
            Ok((y, (1.0 - 1.0 / (x.exp() + 1.0)) * t))
        },
    )
}

fn clip_grad() -> impl Fn(Array) -> Result<Array> {
    custom_vjp(
        |x: Array| x,
        |x: Array| -> Result<(Array, ())> { Ok((x, ())) },
        |_: (), g: Array| -> Result<Array> { jnp::clip(&g, Some(-1.0), Some(1.0)) },
    )
}

fn layer(x: Array) -> Array {
    x.tanh().sin()
}

type Make = fn(bool) -> Result<ClosedJaxpr>;

/// `make_jaxpr` of `g` at `args`, wrapped in a `jit` named `name` when `under_jit`.
fn trace<A: Pytree + Args<A> + 'static, O: TraceOutput + 'static>(name: &str, under_jit: bool, g: impl Fn(A) -> O + 'static, args: A) -> Result<ClosedJaxpr>
where
    O::Out: 'static,
{
    if under_jit {
        let j = jit(g).with_name(name);
        make_jaxpr(move |a: A| j.call(a), args)
    } else {
        make_jaxpr(g, args)
    }
}

fn case(name: &'static str, make: Make) -> (&'static str, Make) {
    (name, make)
}

/// The cases of `tests/data/transform_jaxprs.py`, in its order.
fn cases() -> Vec<(&'static str, Make)> {
    vec![
        case("jvp", |j| trace("jvp", j, |(x, t): (Array, Array)| jvp(f, &x, &t), (x3(), x3()))),
        case("vjp", |j| trace("vjp", j, |(x, u): (Array, Array)| vjp(f, &x, &u), (x3(), x3()))),
        case("grad", |j| trace("grad", j, |x: Array| grad(loss)(x), x3())),
        case("value_and_grad_has_aux", |j| {
            trace("value_and_grad_has_aux", j, |x: Array| value_and_grad_with_aux(|x: Array| (loss(x.clone()), x.cos()))(x), x3())
        }),
        case("jacfwd", |j| trace("jacfwd", j, |x: Array| jacfwd(f)(x), x3())),
        case("jacrev", |j| trace("jacrev", j, |x: Array| jacrev(f)(x), x3())),
        case("hessian", |j| trace("hessian", j, |x: Array| hessian(loss)(x), x3())),
        case("vmap_in_out_axes", |j| {
            trace("vmap_in_out_axes", j, |(m, v): (Array, Array)| vmap_axes(|(c, s): (Array, Array)| c * s, vec![Some(1), Some(0)], 1)((m, v)), (m23(), x3()))
        }),
        case("vmap_cond", |j| {
            trace("vmap_cond", j, |x: Array| vmap(|x: Array| lax::cond(&x.gt(0.0), |x: Array| x.sin(), |x: Array| x.cos(), x))(x), x3())
        }),
        case("custom_jvp", |j| trace("custom_jvp", j, |x: Array| log1pexp()(x), x3())),
        case("grad_custom_jvp", |j| trace("grad_custom_jvp", j, |x: Array| grad(|x: Array| log1pexp()(x).map(|y| y.sum()))(x), x3())),
        case("custom_vjp", |j| trace("custom_vjp", j, |x: Array| clip_grad()(x), x3())),
        case("grad_custom_vjp", |j| {
            trace("grad_custom_vjp", j, |x: Array| grad(|x: Array| clip_grad()(x).map(|y| (y * 5.0).sum()))(x), x3())
        }),
        case("checkpoint", |j| trace("checkpoint", j, |x: Array| checkpoint(layer)(x), x3())),
        case("grad_checkpoint", |j| trace("grad_checkpoint", j, |x: Array| grad(|x: Array| checkpoint(layer)(x).map(|y| y.sum()))(x), x3())),
    ]
}

/// Every case and its `jit/` twin as `=== name` sections, the capture script's format.
fn ours() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, make) in cases() {
        for (prefix, under_jit) in [("", false), ("jit/", true)] {
            let text = match make(under_jit) {
                Ok(j) => j.to_string(),
                Err(e) => format!("error: {}", e.message),
            };
            out.insert(format!("{prefix}{name}"), text);
        }
    }
    out
}

fn sections(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in text.split("=== ").skip(1) {
        let (name, body) = part.split_once('\n').unwrap();
        out.insert(name.to_string(), body.trim_end().to_string());
    }
    out
}

fn render(texts: &BTreeMap<String, String>) -> String {
    let order: Vec<String> = cases().iter().flat_map(|(n, _)| [n.to_string(), format!("jit/{n}")]).collect();
    order.iter().map(|n| format!("=== {n}\n{}\n", texts[n])).collect()
}

#[test]
fn transformation_jaxprs_golden() {
    expect_file!["../data/transform_jaxprs.ours.txt"].assert_eq(&render(&ours()));
}

/// The primitive of every equation in `text`, nested jaxprs included, in print order.
/// `jit` equations are left out: our nested `jit` is inlined into the enclosing trace
/// (`Jitted::call` under a trace), where JAX stages a `jit[name=.. jaxpr={..}]` equation
/// (and jnp.clip is itself a jitted function in JAX).
fn primitives(text: &str) -> Vec<String> {
    text.split(" = ")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
        .filter(|p| !p.is_empty() && p != "jit")
        .collect()
}

const PULLBACK: &str = "our VJP evaluates the forward pass and then calls each primitive's pullback rule going back, \
    so derivative factors (`cos` of `sin`) are computed in the backward pass; JAX linearizes (jvp + partial eval) and \
    transposes, so they are computed forward; the cotangent seed is a staged 0-d `broadcast_in_dim 1.0` (JAX: a literal)";
const BASIS: &str = "vmap over the standard basis, as JAX, but our basis is `iota`/`eq`/`convert_element_type` \
    (JAX's adds `add 0` and `split`), plus the pullback-order difference";

/// Cases whose primitive sequence differs from JAX's by design (or by a gap listed in the
/// reason), and why. `DIFFERENCES` covers the `jit/` twins too.
const DIFFERENCES: &[(&str, &str)] = &[
    ("vjp", PULLBACK),
    ("grad", PULLBACK),
    ("value_and_grad_has_aux", PULLBACK),
    ("jacfwd", BASIS),
    ("jacrev", BASIS),
    ("hessian", BASIS),
    // A batched predicate: both branches run on every lane and `select_n` picks; JAX 0.10
    // first makes each branch's operand safe (`eq`, `stop_gradient`, `select_n`) per branch.
    ("vmap_cond", "cond with a batched predicate"),
    // Gap: the rule is differentiated as a whole (its primal part is staged again, with
    // extra reductions) where JAX linearizes it and transposes only the tangent part.
    ("grad_custom_jvp", "reverse mode of custom_jvp"),
    // jnp.clip is a jitted function in JAX that converts its bounds; ours binds max/min on literals.
    ("grad_custom_vjp", "jnp.clip"),
    // The body is recomputed inline in the backward pass; JAX keeps a `remat2[differentiated=True]`.
    ("grad_checkpoint", "remat2 in the backward pass"),
];

#[test]
fn structure_matches_jax() {
    let jax_text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/transform_jaxprs.txt")).unwrap();
    assert!(jax_text.starts_with("# jax 0.10.2"), "captured with jax 0.10.2");
    let theirs = sections(&jax_text);
    let ours = ours();
    let mut mismatches = vec![];
    for (name, text) in &ours {
        let base = name.trim_start_matches("jit/");
        if DIFFERENCES.iter().any(|(n, _)| *n == base) {
            continue;
        }
        let (a, b) = (primitives(text), primitives(&theirs[name]));
        if a != b {
            mismatches.push(format!("{name}:\n  ours {a:?}\n  jax  {b:?}"));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// JAX 0.10.2 prints a sub-jaxpr of more than 10 equations once, before the top-level
/// jaxpr, and refers to it by name (text captured from `jax.make_jaxpr` of the same cond).
#[test]
fn long_sub_jaxprs_are_outlined_as_in_jax() {
    let long = |x: Array| (0..11).fold(x, |x, _| x.sin());
    let j = make_jaxpr(move |(p, x): (Array, Array)| lax::cond(&p, long, |x: Array| x.cos(), x), (Array::scalar(true), Array::scalar(1.0f32))).unwrap();
    expect_test::expect![[r#"
        let jaxpr = { lambda ; a:f32[]. let
            b:f32[] = sin a
            c:f32[] = sin b
            d:f32[] = sin c
            e:f32[] = sin d
            f:f32[] = sin e
            g:f32[] = sin f
            h:f32[] = sin g
            i:f32[] = sin h
            j:f32[] = sin i
            k:f32[] = sin j
            l:f32[] = sin k
          in (l,) } in
        { lambda ; m:bool[] n:f32[]. let
            o:i32[] = convert_element_type[new_dtype=int32 weak_type=False] m
            p:f32[] = cond[
              branches=({ lambda ; q:f32[]. let r:f32[] = cos q in (r,) } jaxpr)
            ] o n
          in (p,) }"#]]
    .assert_eq(&j.to_string());
}
