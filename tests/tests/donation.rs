//! Buffer donation (`donate_argnums`): the lowered module marks donated arguments with
//! `tf.aliasing_output`, the output reuses the donated buffer (same data pointer), the
//! donated array is deleted (JAX's RuntimeError on use), unusable donations warn once.

use jax::prelude::*;

fn v(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn donated_buffer_is_reused_and_the_argument_deleted() {
    let f = jit(|x: Array| x * 2.0 + 1.0).donate_argnums(&[0]);
    let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let ptr = x.unsafe_buffer_pointer().unwrap();
    let y = f.call(&x).unwrap();
    assert_eq!(v(&y), vec![3.0, 5.0, 7.0, 9.0, 11.0, 13.0]);
    assert_eq!(y.unsafe_buffer_pointer().unwrap(), ptr, "the output lives in the donated buffer");
    assert!(x.is_deleted());
    let e = x.to_vec::<f32>().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Runtime);
    assert_eq!(e.message, "Array has been deleted with shape=float32[2,3].");
    // Passing the deleted array again is the same error.
    let e = f.call(&x).unwrap_err();
    assert_eq!(e.message, "Array has been deleted with shape=float32[2,3].");
    // So is an eager op on it: the error is raised where the array is used.
    let e = jnp::sum(&x, None).unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Runtime, "Array has been deleted with shape=float32[2,3]."));
    // Operators cannot return a Result: outside tracing they panic with the error (a
    // session shows it as the cell's error, at the cell's line).
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| &x + 1.0)).unwrap_err();
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(msg, "RuntimeError: Array has been deleted with shape=float32[2,3].");
    // The result is an ordinary array: donating it again chains in place.
    let z = f.call(&y).unwrap();
    assert_eq!(z.unsafe_buffer_pointer().unwrap(), ptr);
    assert_eq!(v(&z), vec![7.0, 11.0, 15.0, 19.0, 23.0, 27.0]);
    assert!(y.is_deleted());
}

#[test]
fn lowered_text_marks_donated_arguments() {
    let f = jit(|(p, g, lr): (Array, Array, Array)| (p - g * lr.clone(), lr)).donate_argnums(&[0]);
    let s = ShapeDtypeStruct::new(&[3], DType::F32);
    let text = f.lower((&s, &s, &ShapeDtypeStruct::new(&[], DType::F32))).unwrap().as_text();
    assert!(text.contains("%arg0: tensor<3xf32> {tf.aliasing_output = 0 : i32}"), "{text}");
    assert!(!text.contains("%arg1: tensor<3xf32> {tf.aliasing_output"), "{text}");
    // Undonated arguments stay usable; the donated one is deleted after a real call.
    let (p, g) = (Array::from_slice(&[1.0f32, 2.0, 3.0]), Array::from_slice(&[1.0f32, 1.0, 1.0]));
    let lr = Array::scalar(0.5f32);
    let (p2, _) = f.call((&p, &g, &lr)).unwrap();
    assert_eq!(v(&p2), vec![0.5, 1.5, 2.5]);
    assert!(p.is_deleted() && !g.is_deleted() && !lr.is_deleted());
    assert_eq!(v(&g), vec![1.0, 1.0, 1.0]);
}

#[test]
fn a_pytree_argument_donates_every_leaf() {
    // An SGD step on a Vec of parameters, donated: every parameter buffer is reused.
    let step = jit(|(ps, gs): (Vec<Array>, Vec<Array>)| -> Vec<Array> {
        // A learning rate of 0.5 keeps every product exact, fused into an FMA or not.
        ps.iter().zip(&gs).map(|(p, g)| p.clone() - g.clone() * 0.5).collect()
    })
    .donate_argnums(&[0]);
    let ps = vec![Array::from_slice(&[1.0f32, 2.0]), Array::from_slice(&[3.0f32])];
    let gs = vec![Array::from_slice(&[2.0f32, 2.0]), Array::from_slice(&[2.0f32])];
    let ptrs: Vec<usize> = ps.iter().map(|p| p.unsafe_buffer_pointer().unwrap()).collect();
    let out = step.call((&ps, &gs)).unwrap();
    assert_eq!(out.iter().map(v).collect::<Vec<_>>(), vec![vec![0.0, 1.0], vec![2.0]]);
    assert_eq!(out.iter().map(|p| p.unsafe_buffer_pointer().unwrap()).collect::<Vec<_>>(), ptrs);
    assert!(ps.iter().all(|p| p.is_deleted()) && gs.iter().all(|g| !g.is_deleted()));
}

#[test]
fn donation_reads_inputs_before_overwriting_them() {
    // A reversal into the donated buffer must not read already-overwritten elements.
    let f = jit(|x: Array| x.matmul(&x.t())).donate_argnums(&[0]);
    let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let y = f.call(&x).unwrap();
    assert_eq!(v(&y), vec![5.0, 11.0, 11.0, 25.0]);
}

#[test]
fn unusable_donation_warns_once_and_keeps_the_argument() {
    let f = jit(|x: Array| x.sum()).donate_argnums(&[0]);
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0]);
    let before = jax::transform::jit::warnings_issued().len();
    assert_eq!(v(&f.call(&x).unwrap()), vec![6.0]);
    assert_eq!(v(&f.call(&x).unwrap()), vec![6.0]);
    assert!(!x.is_deleted());
    let w: Vec<String> = jax::transform::jit::warnings_issued()[before..]
        .iter()
        .filter(|w| w.contains("not usable"))
        .cloned()
        .collect();
    assert_eq!(w, vec!["Some donated buffers were not usable: float32[3].".to_string()]);
}

/// Runs `f` donated and undonated on the same values: results agree, the donated output
/// lives in the donated buffer.
fn check_in_place(f: impl Fn(Array) -> Array + Clone + 'static, x: Vec<f32>, shape: &[usize]) {
    let plain = jit(f.clone());
    let donating = jit(f).donate_argnums(&[0]);
    let a = Array::from_vec(x.clone(), shape).unwrap();
    let want = v(&plain.call(&a).unwrap());
    let b = Array::from_vec(x, shape).unwrap();
    let ptr = b.unsafe_buffer_pointer().unwrap();
    let got = donating.call(&b).unwrap();
    assert_eq!(v(&got), want);
    assert_eq!(got.unsafe_buffer_pointer().unwrap(), ptr);
    assert!(b.is_deleted());
}

#[test]
fn in_place_results_match_for_ops_that_read_other_elements() {
    let n = 37;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    // Elementwise (computed in the buffer), reversal, reduction-dependent, scans, shifts.
    check_in_place(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x, x.clone(), &[n]);
    check_in_place(|x: Array| x.clone() + jnp::flip(&x, None).unwrap(), x.clone(), &[n]);
    check_in_place(|x: Array| x.clone() - x.mean(), x.clone(), &[n]);
    check_in_place(|x: Array| x.cumsum(0), x.clone(), &[n]);
    check_in_place(|x: Array| jnp::roll(&x, 3, None).unwrap() * x, x.clone(), &[n]);
    let m: Vec<f32> = (0..36).map(|i| i as f32 * 0.5 - 4.0).collect();
    check_in_place(|x: Array| x.clone() + x.t(), m.clone(), &[6, 6]);
    check_in_place(|x: Array| x.matmul(&x) - x, m, &[6, 6]);
    // Exact reference for the reversal.
    let f = jit(|x: Array| x.clone() + jnp::flip(&x, None).unwrap()).donate_argnums(&[0]);
    let y = f.call(&Array::from_slice(&[1.0f32, 2.0, 4.0, 8.0])).unwrap();
    assert_eq!(v(&y), vec![9.0, 6.0, 6.0, 9.0]);
}

#[test]
fn elementwise_donation_computes_in_the_buffer_without_a_copy() {
    let f = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x).donate_argnums(&[0]);
    let text = f.lower(&ShapeDtypeStruct::new(&[1024], DType::F32)).unwrap().compile().unwrap().as_text();
    assert!(!text.contains("memref.copy"), "{text}");
    assert!(!text.contains("memref.alloc"), "{text}");
    // Chained steps keep one buffer.
    let mut x = jnp::arange(1024.0);
    let ptr = x.unsafe_buffer_pointer().unwrap();
    let mut want: Vec<f64> = (0..1024).map(|i| i as f64).collect();
    for _ in 0..3 {
        x = f.call(&x).unwrap();
        want.iter_mut().for_each(|w| *w = (*w * 1.5 + 0.5).tanh() * *w);
    }
    assert_eq!(x.unsafe_buffer_pointer().unwrap(), ptr);
    for (g, w) in v(&x).iter().zip(&want) {
        assert!((*g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
    }
}

#[test]
fn a_shared_donated_buffer_is_only_read() {
    // The same array passed twice, donated once: the other argument still reads the
    // original values, and the donated array is deleted.
    let f = jit(|(a, b): (Array, Array)| a * 2.0 + b).donate_argnums(&[0]);
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0]);
    let y = f.call((&x, &x)).unwrap();
    assert_eq!(v(&y), vec![3.0, 6.0, 9.0]);
    assert!(x.is_deleted());
}

#[test]
fn donated_arguments_whose_outputs_cross_fall_back_to_fresh_buffers() {
    // Output 1 is x, written where y was, while output 0 (x - y) reads y: no in-place
    // order exists, so the executable uses fresh outputs; results are still right.
    let f = jit(|(x, y): (Array, Array)| (x.clone() - y, x)).donate_argnums(&[0, 1]);
    let (x, y) = (Array::from_slice(&[5.0f32, 6.0, 7.0]), Array::from_slice(&[1.0f32, 1.0, 2.0]));
    let (d, x2) = f.call((&x, &y)).unwrap();
    assert_eq!(v(&d), vec![4.0, 5.0, 5.0]);
    assert_eq!(v(&x2), vec![5.0, 6.0, 7.0]);
    assert!(x.is_deleted() && y.is_deleted());
}
