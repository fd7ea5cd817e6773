//! Control flow (`cond`, `switch`, `while_loop`, `fori_loop`, `scan`, `map`): values
//! eagerly and under jit against Rust loops, jaxprs in JAX's printed form, and loops
//! that stay loops.

use jax::prelude::*;

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

#[test]
fn cond_and_switch_pick_branches_eagerly_and_under_jit() {
    let x = Array::from_slice(&[1.0f32, 2.0]);
    let r = lax::cond(&Array::scalar(true), |x: Array| x + 1.0, |x: Array| x - 1.0, x.clone()).unwrap();
    assert_eq!(f64s(&r), vec![2.0, 3.0]);
    let f = jit(|(p, x): (Array, Array)| lax::cond(&p, |x: Array| x + 1.0, |x: Array| x - 1.0, x));
    assert_eq!(f64s(&f.call((Array::scalar(false), &x)).unwrap()), vec![0.0, 1.0]);
    assert_eq!(f64s(&f.call((Array::scalar(true), &x)).unwrap()), vec![2.0, 3.0]);
    let j = f.trace((Array::scalar(true), &x)).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:bool[] b:f32[2]. let
            c:i32[] = convert_element_type[new_dtype=int32 weak_type=False] a
            d:f32[2] = cond[
              branches=(
                { lambda ; e:f32[2]. let f:f32[2] = sub e 1.0:f32[] in (f,) }
                { lambda ; g:f32[2]. let h:f32[2] = add g 1.0:f32[] in (h,) }
              )
            ] c b
          in (d,) }"#]]
    .assert_eq(&j.jaxpr().to_string());
    // switch clamps its index.
    let s = jit(|(i, x): (Array, Array)| {
        lax::switch(&i, &[&|x: Array| x.clone(), &|x: Array| x * 2.0, &|x: Array| -x], x)
    });
    let x = Array::scalar(3.0f32);
    for (i, want) in [(-5, 3.0), (0, 3.0), (1, 6.0), (2, -3.0), (9, -3.0)] {
        assert_eq!(s.call((Array::scalar(i), &x)).unwrap().item::<f32>().unwrap() as f64, want, "index {i}");
    }
    // Closed-over values in branches.
    let k = Array::from_slice(&[10.0f32, 20.0]);
    let g = jit(move |p: Array| lax::cond(&p, |_: ()| k.clone() * 2.0, |_: ()| k.clone(), ()));
    assert_eq!(f64s(&g.call(Array::scalar(true)).unwrap()), vec![20.0, 40.0]);
}

#[test]
fn while_loop_and_fori_loop_match_rust_loops() {
    let r = lax::while_loop(|x: Array| x.lt(10), |x: Array| x + 1, Array::weak_scalar(jax::ir::Scalar::I32(0))).unwrap();
    assert_eq!(r.item::<i32>().unwrap(), 10);
    let j = make_jaxpr(|x: Array| lax::while_loop(|x: Array| x.lt(10), |x: Array| x + 1, x), 0).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:i32[]. let
            b:i32[] = while[
              body_jaxpr={ lambda ; c:i32[]. let d:i32[] = add c 1:i32[] in (d,) }
              body_nconsts=0
              cond_jaxpr={ lambda ; e:i32[]. let f:bool[] = lt e 10:i32[] in (f,) }
              cond_nconsts=0
            ] a
          in (b,) }"#]]
    .assert_eq(&j.to_string());
    // Collatz steps of 27 (111), a data-dependent trip count, under jit.
    let collatz = jit(|n: Array| {
        lax::while_loop(
            |(n, _): (Array, Array)| n.gt(1),
            |(n, s): (Array, Array)| -> Result<(Array, Array)> {
                let half = (n.clone() / 2).astype(DType::I32);
                let odd = n.clone() * 3 + 1;
                let even = (half.clone() * 2).eq(&n);
                Ok((jnp::where_(&even, &half, &odd)?, s + 1))
            },
            (n, Array::scalar(0i32)),
        )
    });
    let (_, steps) = collatz.call(Array::scalar(27i32)).unwrap();
    assert_eq!(steps.item::<i32>().unwrap(), 111);
    // fori_loop with static bounds is a scan; sum of i for i in 0..10.
    let f = jit(|x: Array| lax::fori_loop(0, 10, |(i, x): (Array, Array)| x + i, x));
    assert_eq!(f.call(Array::scalar(0i32)).unwrap().item::<i32>().unwrap(), 45);
    let text = f.trace(Array::scalar(0i32)).unwrap().jaxpr().to_string();
    assert!(text.contains("scan["), "{text}");
    assert!(text.contains("length=10"), "{text}");
    // The static lower bound is a literal operand of the scan, as in JAX's jaxpr
    // (inventory §1.1: `] 0:i32[] a`), not a constvar.
    let j = make_jaxpr(|x: Array| lax::fori_loop(0, 10, |(i, x): (Array, Array)| x + i, x), 0).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:i32[]. let
            _:i32[] b:i32[] = scan[
              jaxpr={ lambda ; c:i32[] d:i32[]. let
                  e:i32[] = add c 1:i32[]
                  f:i32[] = convert_element_type[new_dtype=int32 weak_type=False] c
                  g:i32[] = add d f
                in (e, g) }
              length=10
              reverse=False
              unroll=1
            ] 0:i32[] a
          in (b,) }"#]].assert_eq(&j.to_string());
    assert_eq!(lax::fori_loop(3, 10, |(i, x): (Array, Array)| x + i, Array::scalar(0i32)).unwrap().item::<i32>().unwrap(), 42);
    // Dynamic bounds: a while loop.
    let g = jit(|(n, x): (Array, Array)| lax::fori_loop_dynamic(&Array::scalar(0i32), &n, |(i, x): (Array, Array)| x + i.astype(DType::F32), x));
    assert_eq!(g.call((Array::scalar(5i32), Array::scalar(0.5f32))).unwrap().item::<f32>().unwrap(), 10.5);
}

#[test]
fn scan_cumulative_sum_reverse_and_map() {
    let xs = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);
    let step = |(c, x): (Array, Array)| -> (Array, Array) {
        let c2 = c + x;
        (c2.clone(), c2)
    };
    let (c, ys) = lax::scan(step, Array::scalar(0.0f32), xs.clone(), None, false, 1).unwrap();
    assert_eq!(c.item::<f32>().unwrap(), 10.0);
    assert_eq!(f64s(&ys), vec![1.0, 3.0, 6.0, 10.0]);
    let (_, rys) = lax::scan(step, Array::scalar(0.0f32), xs.clone(), None, true, 1).unwrap();
    assert_eq!(f64s(&rys), vec![10.0, 9.0, 7.0, 4.0]);
    // 2-d xs under jit: running product of rows.
    let m = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    let f = jit(|m: Array| lax::scan(|(c, r): (Array, Array)| (&c * &r, c.sum()), jnp::ones(&[2], DType::F32), m, None, false, 1));
    let (c, sums) = f.call(&m).unwrap();
    assert_eq!(f64s(&c), vec![15.0, 48.0]);
    assert_eq!(f64s(&sums), vec![2.0, 3.0, 11.0]);
    let sq = lax::map(|x: Array| &x * &x, xs).unwrap();
    assert_eq!(f64s(&sq), vec![1.0, 4.0, 9.0, 16.0]);
}

#[test]
fn a_thousand_step_loop_stays_a_loop() {
    let f = jit(|x: Array| lax::fori_loop(0, 1000, |(_, x): (Array, Array)| x * 0.999 + 1.0, x));
    let lowered = f.lower(Array::scalar(0.0f32)).unwrap().as_text();
    assert_eq!(lowered.matches("scf.for").count(), 1, "{lowered}");
    let got = f.call(Array::scalar(0.0f32)).unwrap().item::<f32>().unwrap() as f64;
    let mut want = 0.0f32;
    for _ in 0..1000 {
        want = want * 0.999 + 1.0;
    }
    assert!((got - want as f64).abs() < 1e-2, "{got} vs {want}");
}


#[test]
fn vmap_of_control_flow_matches_a_loop() {
    // cond with a batched predicate becomes a select over both branches.
    let f = |x: Array| lax::cond(&x.gt(0.0), |x: Array| &x * 10.0, |x: Array| -x, x);
    let xs = Array::from_slice(&[-2.0f32, 3.0, 0.5, -0.1]);
    assert_eq!(f64s(&vmap(f)(xs.clone()).unwrap()), vec![2.0, 30.0, 5.0, 0.10000000149011612]);
    let j = make_jaxpr(vmap(f), xs.clone()).unwrap().to_string();
    assert!(j.contains("select_n"), "{j}");
    // cond with an unbatched predicate stays a cond over batched branches.
    let g = vmap_axes(|(p, x): (Array, Array)| lax::cond(&p, |x: Array| &x + 1.0, |x: Array| &x - 1.0, x), vec![None, Some(0)], 0);
    assert_eq!(f64s(&g((Array::scalar(true), xs.clone())).unwrap()), vec![-1.0, 4.0, 1.5, 0.8999999761581421]);
    // while with per-lane trip counts: Collatz steps for several n.
    let steps = |n: Array| {
        lax::while_loop(
            |(n, _): (Array, Array)| n.gt(1),
            |(n, s): (Array, Array)| -> Result<(Array, Array)> {
                let half = (n.clone() / 2).astype(DType::I32);
                let even = (&half * 2).eq(&n);
                Ok((jnp::where_(&even, &half, &(&n * 3 + 1))?, s + 1))
            },
            (n, Array::scalar(0i32)),
        )
        .map(|(_, s)| s)
    };
    let ns = Array::from_slice(&[1i32, 2, 3, 6, 7, 27]);
    let want: Vec<f64> = [1u64, 2, 3, 6, 7, 27]
        .iter()
        .map(|&n| {
            let (mut n, mut s) = (n, 0);
            while n > 1 {
                n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
                s += 1;
            }
            s as f64
        })
        .collect();
    assert_eq!(f64s(&vmap(steps)(ns.clone()).unwrap()), want);
    assert_eq!(f64s(&jit(vmap(steps)).call(&ns).unwrap()), want);
    // scan over each row of a batch: per-row cumulative sums.
    let m = Array::from_vec((1..=6).map(|v| v as f32).collect(), &[2, 3]).unwrap();
    let cs = vmap(|r: Array| lax::scan(|(c, x): (Array, Array)| (&c + &x, &c + &x), Array::scalar(0.0f32), r, None, false, 1).map(|(_, ys)| ys));
    assert_eq!(f64s(&cs(m).unwrap()), vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
}

#[test]
fn scan_length_and_cond_pred_are_checked_like_jax_at_the_users_line() {
    let step = |(c, x): (Array, Array)| -> (Array, Array) { (&c + &x, &c + &x) };
    // `length` disagreeing with xs' leading axis is an error (it was silently ignored).
    let e = lax::scan(step, Array::scalar(0.0f32), jnp::arange(4.0), Some(7), false, 1).unwrap_err();
    assert_eq!(e.ename(), "ValueError");
    assert_eq!(e.message, "scan got `length` argument of 7 which disagrees with leading axis sizes [4].");
    let line = line!() - 3;
    assert_eq!(e.location.as_ref().map(|l| (l.file.ends_with("control_flow.rs"), l.line)), Some((true, line)));
    // A matching `length` is accepted.
    let (c, _) = lax::scan(step, Array::scalar(0.0f32), jnp::arange(4.0), Some(4), false, 1).unwrap();
    assert_eq!(c.item::<f32>().unwrap(), 6.0);
    // xs leaves of different lengths.
    let pair_step = |(c, (a, b)): (Array, (Array, Array))| -> (Array, Array) { (&c + &a + &b, c) };
    let e = lax::scan(pair_step, Array::scalar(0.0f32), (jnp::arange(4.0), jnp::arange(5.0)), None, false, 1).unwrap_err();
    assert_eq!(e.message, "scan got values with different leading axis sizes: 4, 5.");
    let e = lax::scan(step, Array::scalar(0.0f32), jnp::arange(4.0), None, false, 0).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: `unroll` must be a `bool` or a positive `int`.");
    // cond's predicate must be a scalar; the error names the caller's line.
    let e = lax::cond(&jnp::arange(3.0), |x: Array| x + 1.0, |x: Array| x - 1.0, Array::scalar(1.0f32)).unwrap_err();
    let line = line!() - 1;
    assert_eq!(e.to_string().lines().next().unwrap(), "TypeError: Pred must be a scalar, got float32 of shape (3,).");
    assert_eq!(e.location.as_ref().map(|l| l.line), Some(line));
}

/// cond's branch-type error names true_fun's type first, as JAX's text does.
#[test]
fn cond_branch_type_error_names_true_fun_first() {
    let x = jnp::arange(3.0);
    let e = lax::cond(&Array::scalar(true), |x: Array| x * 2.0, |x: Array| x.sum(), x).unwrap_err();
    assert_eq!(e.message, "true_fun and false_fun output must have identical types, got\nf32[3] and f32[]");
}
