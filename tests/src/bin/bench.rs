//! The engine's side of `make bench` (see docs/bench.md for the JSON contract): prints
//! one JSON object with our figures on stdout; progress on stderr.

use jax::prelude::*;
use jax::transform::pipeline::clear_executable_cache;
use serde_json::{json, Map, Value};
use std::time::Instant;

fn stats(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) };
    json!({"median": median, "min": v[0], "max": v[n - 1], "n": n})
}

/// Per-call time in µs of `f` over `iters` calls, `reps` times.
fn per_call_us(reps: usize, iters: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..iters {
        f();
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect()
}

fn main() {
    let mut m = Map::new();
    let notes = Map::new();

    eprintln!("bench: cached jit call f32[8]");
    let x = jnp::arange(8.0);
    let f = jit(|x: Array| x + 1.0);
    m.insert(
        "jit_cached_call_f32_8_us".into(),
        stats(per_call_us(7, 2000, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        })),
    );

    eprintln!("bench: eager sin f32[8]");
    m.insert(
        "eager_sin_f32_8_us".into(),
        stats(per_call_us(7, 2000, || {
            x.sin().block_until_ready().unwrap();
        })),
    );

    eprintln!("bench: first call of sin(x)*2+1 on f32[1024]");
    let x1k = jnp::arange(1024.0);
    let (mut tr, mut lo, mut co, mut ex, mut tot) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..5 {
        clear_executable_cache();
        let g = jit(|x: Array| x.sin() * 2.0 + 1.0);
        let t0 = Instant::now();
        let traced = g.trace(&x1k).unwrap();
        let t1 = Instant::now();
        let lowered = traced.lower().unwrap();
        let t2 = Instant::now();
        let compiled = lowered.compile().unwrap();
        let t3 = Instant::now();
        compiled.call(&x1k).unwrap().block_until_ready().unwrap();
        let t4 = Instant::now();
        tr.push((t1 - t0).as_secs_f64() * 1e3);
        lo.push((t2 - t1).as_secs_f64() * 1e3);
        co.push((t3 - t2).as_secs_f64() * 1e3);
        ex.push((t4 - t3).as_secs_f64() * 1e3);
        tot.push((t4 - t0).as_secs_f64() * 1e3);
    }
    m.insert("first_call_sin_f32_1024_trace_ms".into(), stats(tr));
    m.insert("first_call_sin_f32_1024_lower_ms".into(), stats(lo));
    m.insert("first_call_sin_f32_1024_compile_ms".into(), stats(co));
    m.insert("first_call_sin_f32_1024_first_exec_ms".into(), stats(ex));
    m.insert("first_call_sin_f32_1024_total_ms".into(), stats(tot));

    println!("{}", json!({"schema": "jaxrepl-bench/1", "metrics": m, "notes": notes}));
}
