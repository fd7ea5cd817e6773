//! Codegen measurement probe (issue 4): run in release mode, prints min / median per case.
//! `cargo run --release -p jaxrepl-tests --bin codegen_probe [case...]`; cases: ew, sum,
//! softmax, loops, first, scan, math; `ir [sum|softmax]` prints a compiled module, `ir
//! donated` the bench's donated tanh chain beside the fresh-output one. Not a test: figures only, on stderr-free stdout.

use jax::prelude::*;
use jax::transform::pipeline::clear_executable_cache;
use std::time::Instant;

fn minmed(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2])
}

/// CPU seconds used so far by all threads of this process (/proc/self/task/*/schedstat),
/// a figure the other jobs on a loaded 2-core machine do not inflate the way they do
/// wall-clock time.
fn cpu_s() -> f64 {
    let mut ns = 0u64;
    if let Ok(d) = std::fs::read_dir("/proc/self/task") {
        for t in d.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
            }
        }
    }
    ns as f64 * 1e-9
}

/// Seconds per call of `f`, `reps` samples of `inner` calls after 2 warm-ups: wall-clock
/// (min, median), printed with the CPU time per call (min, median) on the line after.
fn time(reps: usize, inner: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    f();
    let mut cpu = vec![];
    let r = minmed(
        (0..reps)
            .map(|_| {
                let c = cpu_s();
                let t = Instant::now();
                for _ in 0..inner {
                    f();
                }
                cpu.push((cpu_s() - c) / inner as f64);
                t.elapsed().as_secs_f64() / inner as f64
            })
            .collect(),
    );
    let (cm, cmd) = minmed(cpu);
    println!("  (cpu time per call {:.3} / {:.3} ms)", cm * 1e3, cmd * 1e3);
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |c: &str| args.is_empty() || args.iter().any(|a| a == c);
    let n = 10_000_000usize;
    let key = jax::random::key(0);
    if want("ew") {
        let x = jax::random::normal(&key, &[n], DType::F32).unwrap();
        let f = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x);
        let (mn, md) = time(15, 1, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("ew tanh(x*1.5+0.5)*x f32[1e7]: {:.2} / {:.2} ms, {:.1} / {:.1} GB/s", mn * 1e3, md * 1e3, 8.0 * n as f64 / mn / 1e9, 8.0 * n as f64 / md / 1e9);
        for (name, g) in [
            ("exp", jit(|x: Array| x.exp())),
            ("log", jit(|x: Array| x.abs().log())),
            ("sin", jit(|x: Array| x.sin())),
            ("erf", jit(|x: Array| jnp::erf(&x).unwrap())),
            ("logistic", jit(|x: Array| jnp::logistic(&x).unwrap())),
        ] {
            let (mn, md) = time(9, 1, || {
                g.call(&x).unwrap().block_until_ready().unwrap();
            });
            println!("ew {name} f32[1e7]: {:.2} / {:.2} ms", mn * 1e3, md * 1e3);
        }
    }
    if args.iter().any(|a| a == "ir") && args.iter().any(|a| a == "donated") {
        // The bench's `elementwise_chain_1e7_donated`: the output written into a donated
        // second argument (the previous output); prints the optimized module and times it
        // beside the fresh-output version.
        let x = jax::random::normal(&key, &[n], DType::F32).unwrap();
        let jf = jit(|(v, _b): (Array, Array)| (v.clone() * 1.5 + 0.5).tanh() * v).donate_argnums(&[1]);
        let buf = jnp::zeros(&[n], DType::F32);
        let c = jf.lower((&x, &buf)).unwrap().compile().unwrap();
        println!("{}", c.as_text());
        std::fs::write("/tmp/probe_don_asm.s", c.as_text_stage(jax::transform::stages::Stage::Asm).unwrap()).unwrap();
        let mut st = jf.call((&x, &buf)).unwrap();
        drop(buf);
        let (mn, md) = time(15, 1, || {
            st = jf.call((&x, &st)).unwrap();
            st.block_until_ready().unwrap();
        });
        println!("donated: {:.2} / {:.2} ms, {:.1} GB/s at min", mn * 1e3, md * 1e3, 8.0 * n as f64 / mn / 1e9);
        let f = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x);
        let (mn, md) = time(15, 1, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("fresh: {:.2} / {:.2} ms, {:.1} GB/s at min", mn * 1e3, md * 1e3, 8.0 * n as f64 / mn / 1e9);
        return;
    }
    if args.iter().any(|a| a == "ir") {
        let has = |c: &str| args.iter().any(|a| a == c);
        let x = if has("softmax") { jnp::ones(&[4096, 1024], DType::F32) } else { jnp::ones(&[n], DType::F32) };
        let f = if has("sum") {
            jit(|x: Array| x.sum())
        } else if has("softmax") {
            jit(|x: Array| nn::softmax(&x, -1).unwrap())
        } else {
            jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x)
        };
        let c = f.lower(&x).unwrap().compile().unwrap();
        println!("{}", c.as_text());
        std::fs::write("/tmp/probe_llvm.ll", c.llvm_ir().unwrap()).unwrap();
        std::fs::write("/tmp/probe_asm.s", c.as_text_stage(jax::transform::stages::Stage::Asm).unwrap()).unwrap();
        let t = Instant::now();
        for _ in 0..5 {
            c.call(&x).unwrap().block_until_ready().unwrap();
        }
        println!("compiled.call: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 5.0);
        return;
    }
    if want("sum") {
        let x = jax::random::normal(&key, &[n], DType::F32).unwrap();
        let f = jit(|x: Array| x.sum());
        let (mn, md) = time(15, 1, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("sum f32[1e7]: {:.2} / {:.2} ms, {:.1} / {:.1} GB/s", mn * 1e3, md * 1e3, 4.0 * n as f64 / mn / 1e9, 4.0 * n as f64 / md / 1e9);
    }
    if want("softmax") {
        let x = jax::random::normal(&key, &[4096, 1024], DType::F32).unwrap();
        let f = jit(|x: Array| nn::softmax(&x, -1).unwrap());
        let (mn, md) = time(15, 1, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("softmax f32[4096,1024]: {:.2} / {:.2} ms", mn * 1e3, md * 1e3);
    }
    if want("loops") {
        let f = jit(|x: Array| lax::fori_loop(0, 10_000, |(i, c): (Array, Array)| c * 0.999 + i.astype(DType::F32), x).unwrap());
        let x = Array::scalar(1.0f32);
        let (mn, md) = time(9, 10, || {
            f.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("fori_loop 10k: {:.2} / {:.2} ns/iter", mn * 1e9 / 1e4, md * 1e9 / 1e4);
        let g = jit(|x: Array| {
            lax::while_loop(|(i, _c): (Array, Array)| i.lt(10_000), |(i, c): (Array, Array)| (i + 1, c * 0.999 + 1.0), (Array::scalar(0i32), x))
                .unwrap()
                .1
        });
        let (mn, md) = time(9, 10, || {
            g.call(&x).unwrap().block_until_ready().unwrap();
        });
        println!("while_loop 10k: {:.2} / {:.2} ns/iter", mn * 1e9 / 1e4, md * 1e9 / 1e4);
    }
    if want("first") {
        let x = jnp::arange(1024.0);
        let mut v = vec![];
        let mut ct = vec![];
        for _ in 0..7 {
            clear_executable_cache();
            let g = jit(|x: Array| x.sin() * 2.0 + 1.0);
            let t0 = Instant::now();
            let c = g.lower(&x).unwrap().compile().unwrap();
            let t1 = Instant::now();
            c.call(&x).unwrap().block_until_ready().unwrap();
            v.push(t0.elapsed().as_secs_f64());
            ct.push((t1 - t0).as_secs_f64());
        }
        let (mn, md) = minmed(v);
        let (cmn, cmd) = minmed(ct);
        println!("first call sin(x)*2+1 f32[1024]: {:.2} / {:.2} ms (lower+compile {:.2} / {:.2})", mn * 1e3, md * 1e3, cmn * 1e3, cmd * 1e3);
    }
    if want("times") {
        // Compile-stage split of small and scan modules at each LLVM opt level.
        let x = jnp::arange(1024.0);
        let x16 = jnp::ones(&[16], DType::F32);
        let sin = jit(|x: Array| x.sin() * 2.0 + 1.0).trace(&x).unwrap().jaxpr().clone();
        let scan = jit(|x: Array| lax::scan(|(c, ()): (Array, ())| (c.clone() * 0.5 + 1.0, c.sin()), x, (), Some(1000), false, 1).unwrap())
            .trace(&x16)
            .unwrap()
            .jaxpr()
            .clone();
        for (name, j) in [("sin f32[1024]", sin), ("scan 1000", scan)] {
            let m = jax::lower::lower_jaxpr(&j, "f", &Default::default()).unwrap();
            std::fs::write(format!("/tmp/probe_{}.mlir", name.split(' ').next().unwrap()), &m.text).unwrap();
            for opt in [0u8, 1, 2] {
                let mut ts = vec![];
                for _ in 0..5 {
                    let t = jax::compile::compile(&m, &jax::compile::CompileOptions { opt_level: opt }).unwrap().times().clone();
                    ts.push(t);
                }
                ts.sort_by(|a, b| a.total().partial_cmp(&b.total()).unwrap());
                let t = &ts[2];
                println!(
                    "compile {name} O{opt}: parse {:.1} passes {:.1} engine {:.1} codegen {:.1} total {:.1} ms (median of 5)",
                    t.parse * 1e3, t.passes * 1e3, t.engine * 1e3, t.codegen * 1e3, t.total() * 1e3
                );
            }
        }
    }
    if want("scan") {
        let x = jnp::ones(&[16], DType::F32);
        let mut v = vec![];
        for _ in 0..5 {
            clear_executable_cache();
            let g = jit(|x: Array| lax::scan(|(c, ()): (Array, ())| (c.clone() * 0.5 + 1.0, c.sin()), x, (), Some(1000), false, 1).unwrap());
            let t0 = Instant::now();
            let c = g.lower(&x).unwrap().compile().unwrap();
            c.call(&x).unwrap();
            v.push(t0.elapsed().as_secs_f64());
        }
        let (mn, md) = minmed(v);
        println!("scan 1000 steps lower+compile+run: {:.2} / {:.2} ms", mn * 1e3, md * 1e3);
    }
}
