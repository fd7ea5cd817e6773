//! Property tests of numpy broadcasting: binary ops (add, mul, maximum, comparisons) and
//! `where` on random compatible shapes (0-d, size-1 and size-0 dims), eager and under
//! `jit`, against an f64 reference computed here; incompatible shapes give an error (never
//! a panic) that names both shapes, eagerly and from a traced call.
//!
//! proptest runs with a fixed seed and no failure-persistence files, so CI runs the same
//! cases every time; a failure found here becomes a plain test case.

use jax::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    Config { cases: 64, failure_persistence: None, rng_seed: RngSeed::Fixed(0x6a61_7872), ..Config::default() }
}

/// Shape of an operand broadcastable to `out`: its last `keep` dims, with the dims whose
/// bit is set in `ones` replaced by 1.
fn operand_shape(out: &[usize], keep: usize, ones: u8) -> Vec<usize> {
    let keep = keep.min(out.len());
    out[out.len() - keep..].iter().enumerate().map(|(i, &d)| if ones >> i & 1 == 1 { 1 } else { d }).collect()
}

/// numpy's broadcast shape of compatible shapes.
fn broadcast(shapes: &[&[usize]]) -> Vec<usize> {
    let n = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let dims = shapes.iter().filter(|s| i + s.len() >= n).map(|s| s[i + s.len() - n]);
            dims.fold(1, |acc, d| if d == 1 { acc } else { d })
        })
        .collect()
}

/// The element of an operand of `shape` that output element `flat` of `out` reads.
fn source_index(shape: &[usize], out: &[usize], flat: usize) -> usize {
    let mut rem = flat;
    let mut coords = vec![0; out.len()];
    for d in (0..out.len()).rev() {
        coords[d] = rem % out[d];
        rem /= out[d];
    }
    let off = out.len() - shape.len();
    shape.iter().enumerate().fold(0, |acc, (d, &n)| acc * n + if n == 1 { 0 } else { coords[d + off] })
}

/// Values in halves in [-2.5, 2.5], so every op is exact in f32 and ties occur.
fn operand(shape: &[usize], seed: usize) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| ((i * 7 + seed * 3) % 11) as f64 / 2.0 - 2.5).collect();
    (Array::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), shape).unwrap(), v)
}

type Op = (&'static str, fn(&[Array; 3]) -> Result<Array>, fn(f64, f64, f64) -> f64);

const OPS: [Op; 6] = [
    ("add", |[a, b, _]| jnp::add(a, b), |a, b, _| a + b),
    ("multiply", |[a, b, _]| jnp::multiply(a, b), |a, b, _| a * b),
    ("maximum", |[a, b, _]| jnp::maximum(a, b), f64_max),
    ("less", |[a, b, _]| jnp::less(a, b), |a, b, _| (a < b) as i32 as f64),
    ("equal", |[a, b, _]| jnp::equal(a, b), |a, b, _| (a == b) as i32 as f64),
    ("where", |[a, b, c]| jnp::where_(&jnp::less(a, b)?, b, c), |a, b, c| if a < b { b } else { c }),
];

fn f64_max(a: f64, b: f64, _: f64) -> f64 {
    a.max(b)
}

fn check(what: &str, got: &Array, shape: &[usize], want: &[f64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.shape(), shape.to_vec(), "{} shape", what);
    prop_assert_eq!(got.to_vec::<f64>().unwrap(), want.to_vec(), "{} values", what);
    Ok(())
}

fn shapes3() -> impl Strategy<Value = [Vec<usize>; 3]> {
    (prop::collection::vec(0usize..4, 0..=3), [0usize..=3, 0usize..=3, 0usize..=3], any::<[u8; 3]>())
        .prop_map(|(out, keep, ones)| [0, 1, 2].map(|k| operand_shape(&out, keep[k], ones[k])))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn binary_ops_and_where_broadcast_like_numpy(shapes in shapes3(), seed in 0usize..11) {
        let ops: Vec<(Array, Vec<f64>)> = shapes.iter().enumerate().map(|(k, s)| operand(s, seed + k)).collect();
        let arrays = [ops[0].0.clone(), ops[1].0.clone(), ops[2].0.clone()];
        let jitted = jit(|(a, b, c): (Array, Array, Array)| -> Result<Vec<Array>> {
            let args = [a, b, c];
            OPS.iter().map(|op| (op.1)(&args)).collect()
        });
        let compiled = jitted.call((&arrays[0], &arrays[1], &arrays[2])).unwrap();
        for (i, (name, f, reference)) in OPS.iter().enumerate() {
            let uses_c = *name == "where";
            let used: Vec<&[usize]> = shapes.iter().take(if uses_c { 3 } else { 2 }).map(|s| s.as_slice()).collect();
            let out = broadcast(&used);
            let n: usize = out.iter().product();
            let want: Vec<f64> = (0..n)
                .map(|k| {
                    let x = |j: usize| ops[j].1[source_index(&shapes[j], &out, k)];
                    reference(x(0), x(1), if uses_c { x(2) } else { 0.0 })
                })
                .collect();
            check(&format!("eager {name} {shapes:?}"), &f(&arrays).unwrap(), &out, &want)?;
            check(&format!("jit {name} {shapes:?}"), &compiled[i], &out, &want)?;
        }
    }

    #[test]
    fn incompatible_shapes_are_errors_naming_both(
        pre in prop::collection::vec(1usize..3, 0..=2),
        suffix in prop::collection::vec(1usize..3, 0..=1),
        (m, n) in (2usize..5, 2usize..5).prop_filter("different sizes", |(m, n)| m != n),
    ) {
        let sa: Vec<usize> = pre.iter().chain([m].iter()).chain(&suffix).copied().collect();
        let sb: Vec<usize> = [n].iter().chain(&suffix).copied().collect();
        let (a, _) = operand(&sa, 0);
        let (b, _) = operand(&sb, 1);
        let py = |s: &[usize]| if s.len() == 1 { format!("({},)", s[0]) } else { format!("({})", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")) };
        for e in [
            jnp::add(&a, &b).unwrap_err(),
            jnp::maximum(&b, &a).unwrap_err(),
            jit(|(a, b): (Array, Array)| &a * &b).call((&a, &b)).unwrap_err(),
        ] {
            prop_assert_eq!(e.ename(), "TypeError");
            prop_assert!(e.message.contains(&py(&sa)) && e.message.contains(&py(&sb)), "{}", e.message);
            prop_assert!(e.message.contains("incompatible shapes for broadcasting"), "{}", e.message);
        }
    }
}
