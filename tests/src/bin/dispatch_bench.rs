//! Micro benchmark of the dispatch path (issue 4): cached jitted calls, eager ops, donated
//! and fresh large outputs. Prints one line per figure (median of 7 repetitions).

use jax::prelude::*;
use std::time::Instant;

fn median_us(reps: usize, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters.min(1000) {
        f();
    }
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[reps / 2]
}

/// CPU time of this thread in ns (/proc/thread-self/schedstat), load-independent.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Median wall time per call (µs) and CPU time per call of this thread (µs).
fn both_us(reps: usize, iters: usize, mut f: impl FnMut()) -> String {
    let c0 = thread_cpu_ns();
    let wall = median_us(reps, iters, &mut f);
    let total_calls = (reps * iters + iters.min(1000)) as f64;
    let cpu = (thread_cpu_ns() - c0) as f64 / 1e3 / total_calls;
    format!("{wall:.3} cpu_us {cpu:.3}")
}

fn minflt() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    rest.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn main() {
    let x = jnp::arange(8.0);
    let f = jit(|x: Array| x + 1.0);
    println!("jit_1arg_f32_8_us {}", both_us(7, 20000, || {
        f.call(&x).unwrap().block_until_ready().unwrap();
    }));
    let g = jit(|(a, b, c): (Array, Array, Array)| a * b + c);
    let (y, z) = (jnp::arange(8.0), jnp::arange(8.0));
    println!("jit_3arg_f32_8_us {}", both_us(7, 20000, || {
        g.call((&x, &y, &z)).unwrap().block_until_ready().unwrap();
    }));
    println!("eager_sin_f32_8_us {}", both_us(7, 20000, || {
        x.sin().block_until_ready().unwrap();
    }));

    if std::env::var("DISPATCH_BENCH_SMALL_ONLY").is_ok() {
        return;
    }
    let n = 10_000_000usize;
    let h = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x);
    let big = jnp::arange(n as f64).block_until_ready().unwrap();
    let _ = h.call(&big).unwrap().block_until_ready().unwrap();
    let f0 = minflt();
    let us = median_us(5, 10, || {
        h.call(&big).unwrap().block_until_ready().unwrap();
    });
    let flt = (minflt() - f0) as f64 / 60.0;
    println!("fresh_tanh_f32_1e7_us {:.1} GBps {:.2} faults_per_call {:.0}", us, 8.0 * n as f64 / us / 1e3, flt);

    let hd = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x).donate_argnums(&[0]);
    let mut cur = jnp::arange(n as f64).block_until_ready().unwrap();
    cur = hd.call(&cur).unwrap().block_until_ready().unwrap();
    let f0 = minflt();
    let us = median_us(5, 10, || {
        let next = hd.call(&cur).unwrap().block_until_ready().unwrap();
        cur = next;
    });
    let flt = (minflt() - f0) as f64 / 60.0;
    println!("donated_tanh_f32_1e7_us {:.1} GBps {:.2} faults_per_call {:.0}", us, 8.0 * n as f64 / us / 1e3, flt);
}
