//! Pytrees: structures (`TreeDef`) printed like JAX's `PyTreeDef`, flatten/unflatten of
//! every container, `tree_map`, `#[derive(Pytree)]` structs with static fields under jit,
//! grad and vmap, `Vec`/`HashMap` arguments and results, cache keys on the structure, and
//! `eval_shape`.

use jax::prelude::*;
use jax::tree::{tree_flatten, tree_leaves, tree_map, tree_map2, tree_structure, tree_unflatten};
use std::collections::{BTreeMap, HashMap};

fn v(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

fn arr(x: &[f32]) -> Array {
    Array::from_slice(x)
}

/// A layer with a static activation name: leaves `w`, `b`; `act` is structure.
#[derive(Clone, Debug, Pytree)]
struct Layer {
    w: Array,
    b: Array,
    #[pytree(static)]
    act: String,
}

impl Layer {
    fn apply(&self, x: &Array) -> Array {
        let y = x.clone() * self.w.clone() + self.b.clone();
        if self.act == "tanh" { y.tanh() } else { y }
    }
}

/// A tuple struct with a nested container.
#[derive(Clone, Pytree)]
struct Pair(Array, Vec<Array>);

#[test]
fn treedefs_print_like_jax() {
    let x = arr(&[1.0]);
    assert_eq!(tree_structure(&x).to_string(), "PyTreeDef(*)");
    assert_eq!(tree_structure(&(x.clone(), vec![x.clone(), x.clone()])).to_string(), "PyTreeDef((*, [*, *]))");
    assert_eq!(tree_structure(&(x.clone(),)).to_string(), "PyTreeDef((*,))");
    assert_eq!(tree_structure(&()).to_string(), "PyTreeDef(())");
    assert_eq!(tree_structure(&None::<Array>).to_string(), "PyTreeDef(None)");
    assert_eq!(tree_structure(&Some(x.clone())).to_string(), "PyTreeDef(*)");
    let mut m = HashMap::new();
    m.insert("b".to_string(), vec![x.clone()]);
    m.insert("a".to_string(), vec![]);
    assert_eq!(tree_structure(&m).to_string(), "PyTreeDef({'a': [], 'b': [*]})");
    let l = Layer { w: x.clone(), b: x.clone(), act: "relu".into() };
    assert_eq!(tree_structure(&l).to_string(), "PyTreeDef(CustomNode(Layer[('relu',)], [*, *]))");
    assert_eq!(tree_structure(&Pair(x.clone(), vec![x.clone()])).to_string(), "PyTreeDef(CustomNode(Pair[()], [*, [*]]))");
    assert_eq!(tree_structure(&(x.clone(), Static(3))).to_string(), "PyTreeDef((*, static(3)))");
    let d = tree_structure(&(x.clone(), vec![x.clone(), x.clone()], m));
    assert_eq!(d.num_leaves(), 4);
    assert_eq!(format!("{d:?}"), d.to_string());
}

#[test]
fn flatten_unflatten_round_trips_every_container() {
    let (a, b, c) = (arr(&[1.0]), arr(&[2.0, 3.0]), arr(&[4.0]));
    let mut m: BTreeMap<String, Option<Array>> = BTreeMap::new();
    m.insert("z".into(), Some(c.clone()));
    m.insert("y".into(), None);
    let tree = (vec![a.clone(), b.clone()], m, Layer { w: a.clone(), b: c.clone(), act: "tanh".into() }, ());
    let (leaves, def) = tree_flatten(&tree);
    // Dict values in sorted key order; None contributes nothing; statics are not leaves.
    let got: Vec<Vec<f32>> = leaves.iter().map(v).collect();
    assert_eq!(got, vec![vec![1.0], vec![2.0, 3.0], vec![4.0], vec![1.0], vec![4.0]]);
    assert_eq!(
        def.to_string(),
        "PyTreeDef(([*, *], {'y': None, 'z': *}, CustomNode(Layer[('tanh',)], [*, *]), ()))"
    );
    let back: (Vec<Array>, BTreeMap<String, Option<Array>>, Layer, ()) = tree_unflatten(&def, leaves.clone()).unwrap();
    assert_eq!(back.0.len(), 2);
    assert!(back.1["y"].is_none());
    assert_eq!(v(back.1["z"].as_ref().unwrap()), vec![4.0]);
    assert_eq!(back.2.act, "tanh");
    assert_eq!(v(&back.2.b), vec![4.0]);
    // Wrong leaf count or a structure of another type is a TypeError.
    let e = tree_unflatten::<(Vec<Array>, BTreeMap<String, Option<Array>>, Layer, ())>(&def, leaves[..3].to_vec()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Type, "{e}");
    assert!(e.to_string().contains("Too few leaves for PyTreeDef; expected 5, got 3"), "{e}");
    let e = tree_unflatten::<Vec<Array>>(&def, leaves).unwrap_err();
    assert!(e.to_string().contains("cannot rebuild a Vec"), "{e}");
}

#[test]
fn tree_map_and_leaves() {
    let t = (arr(&[1.0, 2.0]), vec![arr(&[3.0])], Layer { w: arr(&[4.0]), b: arr(&[5.0]), act: "id".into() });
    let doubled = tree_map(|x| x.clone() * 2.0, &t);
    assert_eq!(tree_leaves(&doubled).iter().map(v).collect::<Vec<_>>(), vec![vec![2.0, 4.0], vec![6.0], vec![8.0], vec![10.0]]);
    assert_eq!(doubled.2.act, "id");
    let diff = tree_map2(|x, y| x.clone() - y.clone(), &doubled, &t).unwrap();
    assert_eq!(v(&diff.0), vec![1.0, 2.0]);
    let other: (Array, Vec<Array>, Layer) = (arr(&[1.0, 2.0]), vec![], t.2.clone());
    assert!(tree_map2(|x, _| x.clone(), &t, &other).is_err());
    // jax::tree_util is the same module.
    assert_eq!(jax::tree_util::tree_structure(&t), tree_structure(&doubled));
}

#[test]
fn derived_struct_under_jit_with_static_field() {
    let f = jit(|(l, x): (Layer, Array)| l.apply(&x));
    let x = arr(&[0.5, -1.0]);
    let tanh = Layer { w: arr(&[2.0, 2.0]), b: arr(&[0.0, 1.0]), act: "tanh".into() };
    let lin = Layer { act: "linear".into(), ..tanh.clone() };
    let y = f.call((&tanh, &x)).unwrap();
    let want: Vec<f32> = vec![(1.0f32).tanh(), (-1.0f32).tanh()];
    for (g, w) in v(&y).iter().zip(&want) {
        assert!((g - w).abs() < 1e-6);
    }
    assert_eq!(v(&f.call((&lin, &x)).unwrap()), vec![1.0, -1.0]);
    // The static field is part of the cache key; the same structure hits the cache.
    assert_eq!(f.cache_size(), 2);
    f.call((tanh.clone(), x.clone())).unwrap();
    assert_eq!(f.cache_size(), 2);
    // A struct result comes back with its static field.
    let g = jit(|l: Layer| Layer { w: l.w.clone() * 3.0, ..l });
    let r = g.call(&tanh).unwrap();
    assert_eq!(r.act, "tanh");
    assert_eq!(v(&r.w), vec![6.0, 6.0]);
    assert_eq!(v(&r.b), vec![0.0, 1.0]);
}

#[test]
fn grad_of_a_struct_has_the_struct_shape() {
    let loss = |(l, x): (Layer, Array)| (l.apply(&x) * l.apply(&x)).sum();
    let l = Layer { w: arr(&[1.0, 2.0]), b: arr(&[0.5, 0.0]), act: "linear".into() };
    let x = arr(&[3.0, -1.0]);
    let (gl, gx) = grad(loss)((l.clone(), x.clone())).unwrap();
    // loss = sum((w x + b)^2): d/dw = 2 (w x + b) x, d/db = 2 (w x + b), d/dx = 2 (w x + b) w.
    assert_eq!(gl.act, "linear");
    assert_eq!(v(&gl.w), vec![21.0, 4.0]);
    assert_eq!(v(&gl.b), vec![7.0, -4.0]);
    assert_eq!(v(&gx), vec![7.0, -8.0]);
    // Under jit, an SGD step on the struct.
    let step = jit(move |(l, x): (Layer, Array)| -> Result<Layer> {
        let g = grad(loss)((l.clone(), x))?.0;
        jax::tree::tree_map2(|p, g| p.clone() - g.clone() * 0.01, &l, &g)
    });
    let l2 = step.call((&l, &x)).unwrap();
    assert_eq!(l2.act, "linear");
    let w = v(&l2.w);
    assert!((w[0] - 0.79).abs() < 1e-6 && (w[1] - 1.96).abs() < 1e-6, "{w:?}");
}

#[test]
fn vmap_over_a_struct() {
    // A batch of 3 layers applied to one shared input per layer (all leaves mapped).
    let f = vmap(|(l, x): (Layer, Array)| l.apply(&x));
    let l = Layer { w: Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1]).unwrap(), b: jnp::zeros(&[3, 1], DType::F32), act: "linear".into() };
    let x = Array::from_vec(vec![10.0f32, 20.0, 30.0], &[3, 1]).unwrap();
    let y = f((l, x)).unwrap();
    assert_eq!(y.shape(), vec![3, 1]);
    assert_eq!(v(&y), vec![10.0, 40.0, 90.0]);
}

#[test]
fn vec_and_hashmap_arguments_and_results() {
    let f = jit(|xs: Vec<Array>| -> Vec<Array> { xs.iter().map(|x| x.clone() + 1.0).collect() });
    let out = f.call(vec![arr(&[1.0]), arr(&[2.0, 3.0])]).unwrap();
    assert_eq!(out.iter().map(v).collect::<Vec<_>>(), vec![vec![2.0], vec![3.0, 4.0]]);
    // Another length is another structure: a new trace, explained as a different pytree.
    f.call(vec![arr(&[1.0])]).unwrap();
    assert_eq!(f.cache_size(), 2);

    let g = jit(|m: HashMap<String, Array>| {
        let mut o = HashMap::new();
        o.insert("sum".to_string(), m["a"].clone() + m["b"].clone());
        o.insert("a".to_string(), m["a"].clone());
        o
    });
    let mut m = HashMap::new();
    m.insert("b".to_string(), arr(&[10.0]));
    m.insert("a".to_string(), arr(&[1.0]));
    let o = g.call(m.clone()).unwrap();
    assert_eq!(v(&o["sum"]), vec![11.0]);
    assert_eq!(v(&o["a"]), vec![1.0]);
    let t = g.trace(&m).unwrap();
    assert_eq!(t.out_tree().to_string(), "PyTreeDef({'a': *, 'sum': *})");
    // The jaxpr takes the dict's leaves in sorted key order: a then b.
    expect_test::expect!["{ lambda ; a:f32[1] b:f32[1]. let c:f32[1] = add a b in (a, c) }"]
    .assert_eq(&t.jaxpr().to_string());
}

#[test]
fn different_pytree_is_explained() {
    let f = jit(|xs: Vec<Array>| xs.into_iter().fold(jnp::zeros(&[], DType::F32), |a, x| a + x.sum()));
    f.call(vec![arr(&[1.0])]).unwrap();
    f.call(vec![arr(&[1.0]), arr(&[2.0])]).unwrap();
    let want = "different input pytree:\n  * now PyTreeDef([*, *]) and before PyTreeDef([*])";
    let reasons: Vec<String> = jax::transform::explain::recent().into_iter().filter_map(|e| e.reason).collect();
    assert!(reasons.iter().any(|r| r.contains(want)), "{reasons:#?}");
    // A changed Static argument is reported as such, not as a different pytree.
    let g = jit(|(x, n): (Array, Static<i32>)| x * (*n as f64));
    g.call((arr(&[1.0]), Static(2))).unwrap();
    g.call((arr(&[1.0]), Static(3))).unwrap();
    let reasons: Vec<String> = jax::transform::explain::recent().into_iter().filter_map(|e| e.reason).collect();
    // jax 0.10.2 reports a changed static argument as pytree node metadata.
    let want = "different input pytree:\n  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree metadata Static(val=3) \
                and before <class 'jax._src.tree_util.Static'> with pytree metadata Static(val=2), so the pytree node metadata does not match";
    assert!(reasons.iter().any(|r| r.contains(want)), "{reasons:#?}");
}

#[test]
fn eval_shape_returns_a_tree_of_specs() {
    let f = |(l, x): (Layer, Array)| (l.apply(&x), vec![x.sum()], Some(l.w.clone()));
    let l = Layer { w: arr(&[1.0, 2.0]), b: arr(&[0.5, 0.0]), act: "linear".into() };
    let s = jax::eval_shape(f, (&l, &ShapeDtypeStruct::new(&[2], DType::F32))).unwrap();
    assert_eq!(s.leaves.len(), 3);
    assert_eq!(
        s.to_string(),
        "(ShapeDtypeStruct(shape=(2,), dtype=float32), [ShapeDtypeStruct(shape=(), dtype=float32)], ShapeDtypeStruct(shape=(2,), dtype=float32))"
    );
    // Arrays work as well as specs; a struct output prints as a dataclass.
    let s = eval_shape(|x: Array| Layer { w: x.clone(), b: x.sum(), act: "relu".into() }, &arr(&[1.0, 2.0, 3.0])).unwrap();
    assert_eq!(
        s.to_string(),
        "Layer(w=ShapeDtypeStruct(shape=(3,), dtype=float32), b=ShapeDtypeStruct(shape=(), dtype=float32), act='relu')"
    );
    let one = jit(|x: Array| x * 2.0).eval_shape(ShapeDtypeStruct::new(&[4, 5], DType::F32)).unwrap();
    assert_eq!(one.leaf().unwrap().shape, vec![4, 5]);
    // Traced.out_info has the output's structure: a bare spec for one output (as JAX's).
    let t = jit(|x: Array| x * 2.0).trace(ShapeDtypeStruct::new(&[4, 5], DType::F32)).unwrap();
    assert_eq!(t.out_info().to_string(), "ShapeDtypeStruct(shape=(4, 5), dtype=float32)");
    let t = jit(|x: Array| (x.sum(), x.clone())).trace(ShapeDtypeStruct::new(&[3], DType::I32)).unwrap();
    assert_eq!(t.out_info().to_string(), "(ShapeDtypeStruct(shape=(), dtype=int32), ShapeDtypeStruct(shape=(3,), dtype=int32))");
}
