//! Throughput of `dot_general` under `jit` (steady state, compiled once): f32 matmul
//! 256/1024/2048, the batch matmuls and the 3-layer MLP (batch 128, width 512) forward and
//! grad of `/work/shared/bench/jax_bench.py`, and small square matmuls for choosing the
//! GEMM-runtime threshold. Prints one line per case: GFLOP/s (or ms) min / median.
//!
//! Usage: `gemm_probe [raw|rawcmp|shapes|big|bmm|mlp|conv|small|ir|mlpir|mlpgrad|gradp|trainp|gradpir|trainpir|gradpjaxpr|trainpjaxpr|gradplow|trainplow]...` (default: all but ir, mlpir, mlpgrad, rawcmp, shapes and the bench's MLP cases gradp/trainp(ir); raw calls
//! matrixmultiply directly, rawcmp compares matrixmultiply with the `gemm` crate the runtime
//! uses, on square products and batches, looped and split over two threads; ir prints the optimized module of matmul 256). Run it once as is and once
//! with `JAXREPL_GEMM_MIN_FLOPS=18446744073709551615` (every product in MLIR loops) or
//! `=0` (every float product through the GEMM runtime) to compare the two paths;
//! `MATMUL_NUM_THREADS=1` keeps matrixmultiply on one thread (raw, rawcmp), `JAXREPL_NUM_THREADS=1`
//! the GEMM runtime.

use jax::prelude::*;
use std::time::Instant;

/// CPU seconds (user + system, all threads) this process has used, from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the ")"; ticks of 1/100 s.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

thread_local! {
    /// CPU seconds per call of the last `time` run (all threads).
    static CPU_PER_CALL: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// Seconds per call of `f`: (min, median) over `reps` timings of enough calls for ~`target` s.
/// Also records the CPU seconds per call (`CPU_PER_CALL`), which on a machine shared with
/// other jobs shows the kernel's speed per busy core when wall time cannot.
fn time(reps: usize, target: f64, mut f: impl FnMut()) -> (f64, f64) {
    f();
    f();
    let t = Instant::now();
    f();
    let once = t.elapsed().as_secs_f64().max(1e-7);
    let inner = ((target / reps as f64) / once).ceil().max(1.0) as usize;
    let c0 = cpu_seconds();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..inner {
                f();
            }
            t.elapsed().as_secs_f64() / inner as f64
        })
        .collect();
    CPU_PER_CALL.with(|c| c.set((cpu_seconds() - c0) / (reps * inner) as f64));
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2])
}

fn normal(shape: &[usize], seed: u32, scale: f32) -> Array {
    let n: usize = shape.iter().product();
    let mut s = seed as u64 * 2654435761 + 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.4 * scale
        })
        .collect();
    Array::from_vec(v, shape).unwrap()
}

fn gflops(name: &str, flops: f64, (min, med): (f64, f64)) {
    let cpu = CPU_PER_CALL.with(|c| c.get());
    println!(
        "{name:<36} {:>7.1} / {:>7.1} GFLOP/s  ({:.3} / {:.3} ms)  {:>6.1} GFLOP per CPU-s",
        flops / min / 1e9,
        flops / med / 1e9,
        min * 1e3,
        med * 1e3,
        flops / cpu / 1e9
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| (args.is_empty() && !matches!(s, "ir" | "mlpir" | "mlpgrad" | "rawcmp" | "gradp" | "trainp" | "gradpir" | "trainpir" | "gradpjaxpr" | "trainpjaxpr" | "gradplow" | "trainplow" | "shapes")) || args.iter().any(|a| a == s);
    let mm = jit(|(a, b): (Array, Array)| a.matmul(&b));
    if want("ir") {
        let (a, b) = (normal(&[256, 256], 1, 1.0), normal(&[256, 256], 2, 1.0));
        println!("{}", mm.lower((&a, &b)).unwrap().compile().unwrap().as_text());
    }
    if want("raw") {
        // matrixmultiply called directly on Vecs: the ceiling for the runtime path.
        for n in [256, 1024, 2048] {
            let (a, b) = (vec![0.5f32; n * n], vec![0.25f32; n * n]);
            let mut c = vec![0f32; n * n];
            let t = time(5, if n >= 1024 { 1.0 } else { 0.4 }, || unsafe {
                matrixmultiply::sgemm(n, n, n, 1.0, a.as_ptr(), n as isize, 1, b.as_ptr(), n as isize, 1, 0.0, c.as_mut_ptr(), n as isize, 1)
            });
            gflops(&format!("raw matrixmultiply sgemm {n}"), 2.0 * (n * n * n) as f64, t);
        }
    }
    if want("rawcmp") {
        rawcmp();
    }
    if want("small") {
        for n in [8, 16, 24, 32, 48, 64, 96, 128] {
            let (a, b) = (normal(&[n, n], 1, 1.0), normal(&[n, n], 2, 1.0));
            let t = time(5, 0.2, || {
                mm.call((&a, &b)).unwrap().block_until_ready().unwrap();
            });
            gflops(&format!("matmul f32 {n}"), 2.0 * (n * n * n) as f64, t);
        }
    }
    if want("big") {
        for n in [256, 512, 1024, 2048] {
            let (a, b) = (normal(&[n, n], 1, 1.0), normal(&[n, n], 2, 1.0));
            let t = time(5, if n >= 1024 { 1.0 } else { 0.4 }, || {
                mm.call((&a, &b)).unwrap().block_until_ready().unwrap();
            });
            gflops(&format!("matmul f32 {n}"), 2.0 * (n * n * n) as f64, t);
        }
    }
    if want("bmm") {
        for (b, n) in [(16, 512), (256, 64)] {
            let (p, q) = (normal(&[b, n, n], 3, 1.0), normal(&[b, n, n], 4, 1.0));
            let t = time(5, 0.6, || {
                mm.call((&p, &q)).unwrap().block_until_ready().unwrap();
            });
            gflops(&format!("batch matmul f32 [{b},{n},{n}]"), 2.0 * (b * n * n * n) as f64, t);
        }
    }
    if want("conv") {
        // NHWC [8, 32, 32, 64] * HWIO [3, 3, 64, 64], stride 1, SAME padding.
        let (x, w) = (normal(&[8, 32, 32, 64], 5, 1.0), normal(&[3, 3, 64, 64], 6, 0.1));
        let dn = jax::ir::ConvDims { lhs_spec: vec![0, 3, 1, 2], rhs_spec: vec![3, 2, 0, 1], out_spec: vec![0, 3, 1, 2] };
        let f = jit(move |(x, w): (Array, Array)| lax::conv_general_dilated(&x, &w, &[1, 1], &[(1, 1), (1, 1)], None, None, Some(dn.clone()), 1).unwrap());
        let t = time(5, 1.0, || {
            f.call((&x, &w)).unwrap().block_until_ready().unwrap();
        });
        gflops("conv NHWC 8x32x32x64, 3x3x64x64", 2.0 * 8.0 * 1024.0 * 64.0 * 64.0 * 9.0, t);
    }
    if want("shapes") {
        shapes();
    }
    if ["gradp", "trainp", "gradpir", "trainpir", "gradpjaxpr", "trainpjaxpr", "gradplow", "trainplow"].iter().any(|m| want(m)) {
        bench_mlp(&want);
    }
    if want("mlp") || want("mlpir") || want("mlpgrad") {
        let (params, x, y) = mlp_inputs();
        let f = jit(|(p, x): (Vec<(Array, Array)>, Array)| fwd(&p, &x));
        let g = jit(grad(|(p, x, y): (Vec<(Array, Array)>, Array, Array)| {
            let d = fwd(&p, &x) - y;
            (&d * &d).mean()
        }));
        if want("mlpir") {
            println!("{}", g.lower((&params, &x, &y)).unwrap().as_text());
            return;
        }
        let flops = 3.0 * 2.0 * 128.0 * 512.0 * 512.0;
        if !want("mlpgrad") {
            let t = time(7, 0.5, || {
                f.call((&params, &x)).unwrap().block_until_ready().unwrap();
            });
            gflops("MLP fwd (3x512, batch 128)", flops, t);
        }
        let t = time(7, 0.5, || {
            for (w, b) in g.call((&params, &x, &y)).unwrap().0 {
                w.block_until_ready().unwrap();
                b.block_until_ready().unwrap();
            }
        });
        // grad: forward plus two products per layer (the first layer's dx is not needed,
        // but JAX's count is the same 3x forward rule of thumb).
        gflops("MLP grad (3x512, batch 128)", 3.0 * flops, t);
    }
}

/// One f32 product `c = a·b` (row-major, `m×k · k×n`) by `lib`: "mm" matrixmultiply
/// (threaded), "mm1" matrixmultiply on one thread (MATMUL_NUM_THREADS is read once, so this
/// is the same as "mm" unless set), "gemm" the gemm crate on rayon, "gemm1" gemm on one thread.
fn raw_product(lib: &str, m: usize, k: usize, n: usize, a: *const f32, b: *const f32, c: *mut f32) {
    unsafe {
        match lib {
            "gemm" | "gemm1" => {
                let par = if lib == "gemm" { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
                gemm::gemm(m, n, k, c, 1, n as isize, false, a, 1, k as isize, b, 1, n as isize, 0.0f32, 1.0f32, false, false, false, par)
            }
            _ => matrixmultiply::sgemm(m, k, n, 1.0, a, k as isize, 1, b, n as isize, 1, 0.0, c, n as isize, 1),
        }
    }
}

/// matrixmultiply against the gemm crate on raw buffers: square products and the two batch
/// shapes, each batch run as a loop of (threaded) products and as two threads with one
/// single-threaded product each.
fn rawcmp() {
    #[derive(Clone, Copy)]
    struct P(*mut f32);
    unsafe impl Send for P {}
    unsafe impl Sync for P {}
    for n in [64, 128, 256, 512, 1024, 2048] {
        let (a, b) = (vec![0.5f32; n * n], vec![0.25f32; n * n]);
        let mut c = vec![0f32; n * n];
        for lib in ["mm", "gemm", "gemm1"] {
            let t = time(5, if n >= 1024 { 1.0 } else { 0.4 }, || raw_product(lib, n, n, n, a.as_ptr(), b.as_ptr(), c.as_mut_ptr()));
            gflops(&format!("raw {lib} {n}"), 2.0 * (n * n * n) as f64, t);
        }
    }
    for (nb, n) in [(16, 512), (256, 64), (64, 128), (1024, 32)] {
        let (a, b) = (vec![0.5f32; nb * n * n], vec![0.25f32; nb * n * n]);
        let mut c = vec![0f32; nb * n * n];
        let sz = n * n;
        for lib in ["mm", "gemm", "gemm1"] {
            let t = time(5, 0.6, || {
                for p in 0..nb {
                    raw_product(lib, n, n, n, a[p * sz..].as_ptr(), b[p * sz..].as_ptr(), c[p * sz..].as_mut_ptr());
                }
            });
            gflops(&format!("raw loop {lib} [{nb},{n},{n}]"), 2.0 * (nb * n * n * n) as f64, t);
        }
        for lib in ["mm", "gemm1"] {
            let cp = P(c.as_mut_ptr());
            let (ap, bp) = (P(a.as_ptr() as *mut f32), P(b.as_ptr() as *mut f32));
            let t = time(5, 0.6, || {
                let half = nb / 2;
                std::thread::scope(|s| {
                    let w = move |r: std::ops::Range<usize>| {
                        let (ap, bp, cp) = (ap, bp, cp);
                        for p in r {
                            unsafe { raw_product(lib, n, n, n, ap.0.add(p * sz), bp.0.add(p * sz), cp.0.add(p * sz)) }
                        }
                    };
                    s.spawn(move || w(half..nb));
                    w(0..half);
                });
            });
            gflops(&format!("raw 2thr {lib} [{nb},{n},{n}]"), 2.0 * (nb * n * n * n) as f64, t);
        }
    }
}

/// The bench's MLP (`bench.rs`): 3 layers of f32[512,512] weights and f32[512] biases,
/// input and target f32[128,512] (fixed seeds).
fn mlp_inputs() -> (Vec<(Array, Array)>, Array, Array) {
    let params = (0..3).map(|i| (normal(&[512, 512], 10 + i, 1.0 / (512f32).sqrt()), jnp::zeros(&[512], DType::F32))).collect();
    (params, normal(&[128, 512], 20, 1.0), normal(&[128, 512], 21, 1.0))
}

/// The MLP's forward pass: `relu(h @ w + b)` per layer, no relu after the last.
fn fwd(p: &[(Array, Array)], x: &Array) -> Array {
    let mut h = x.clone();
    for (i, (w, b)) in p.iter().enumerate() {
        h = h.matmul(w) + b;
        if i + 1 < p.len() {
            h = nn::relu(&h).unwrap();
        }
    }
    h
}

/// The MLP grad and training step exactly as `bench.rs` runs them (gradient with respect
/// to the parameters only; `p - 0.01·g`), steady state of the optimised tier: `gradp`,
/// `trainp` time them (ms); `gradpir`, `trainpir` print the optimized module, `gradpjaxpr`,
/// `trainpjaxpr` the jaxpr, `gradplow`, `trainplow` the lowered (tensor-level) module.
fn bench_mlp(want: &dyn Fn(&str) -> bool) {
    type Params = Vec<(Array, Array)>;
    let (params, x, y) = mlp_inputs();
    fn g(p: Params, x: Array, y: Array) -> jax::Result<Params> {
        grad(move |p: Params| {
            let d = fwd(&p, &x) - &y;
            jnp::mean(&(&d * &d), None)
        })(p)
    }
    let gj = jit(|(p, x, y): (Params, Array, Array)| g(p, x, y).unwrap());
    let tj = jit(|(p, x, y): (Params, Array, Array)| {
        let gr = g(p.clone(), x, y).unwrap();
        p.iter().zip(&gr).map(|((w, b), (gw, gb))| (w - &(gw * 0.01), b - &(gb * 0.01))).collect::<Params>()
    });
    for (name, f) in [("gradp", &gj), ("trainp", &tj)] {
        if want(&format!("{name}jaxpr")) {
            println!("{}", f.trace((&params, &x, &y)).unwrap().jaxpr());
        }
        if want(&format!("{name}low")) {
            println!("{}", f.lower((&params, &x, &y)).unwrap().as_text());
        }
        let c = f.lower((&params, &x, &y)).unwrap().compile().unwrap();
        if want(&format!("{name}ir")) {
            println!("{}", c.as_text());
        }
        if want(name) {
            f.call((&params, &x, &y)).unwrap();
            c.wait_optimized(std::time::Duration::from_secs(300));
            // PROBE_SECONDS stretches the timed loop (for `perf record --delay`).
            let secs = std::env::var("PROBE_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(0.7);
            let t = time(7, secs, || {
                for (w, b) in f.call((&params, &x, &y)).unwrap() {
                    w.block_until_ready().unwrap();
                    b.block_until_ready().unwrap();
                }
            });
            let cpu = CPU_PER_CALL.with(|c| c.get());
            println!("{name}: {:.3} / {:.3} ms (min / median), {:.3} CPU-ms per call", t.0 * 1e3, t.1 * 1e3, cpu * 1e3);
        }
    }
}

/// One product `c = a·b` (`c` row-major `m×n`) with element strides for `a` (`ars`, `acs`)
/// and `b` (`brs`, `bcs`) on the gemm crate, `par` as given.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_strided(m: usize, k: usize, n: usize, a: *const f32, ars: isize, acs: isize, b: *const f32, brs: isize, bcs: isize, c: *mut f32, ldc: usize, par: gemm::Parallelism) {
    unsafe { gemm::gemm(m, n, k, c, 1, ldc as isize, false, a, acs, ars, b, bcs, brs, 0.0f32, 1.0f32, false, false, false, par) }
}

/// The MLP's and the 2048 matmul's product shapes (NN, NT, TN layouts) on raw buffers:
/// the gemm crate threaded by itself (`rayon2`), on one thread (`one`), and split by hand
/// into row panels (`rows/P`) or column panels (`cols/P`) run as rayon tasks, one
/// single-threaded product each. Prints µs min / median per product and GFLOP/s at min.
fn shapes() {
    #[derive(Clone, Copy)]
    struct P(*mut f32);
    unsafe impl Send for P {}
    unsafe impl Sync for P {}
    // (name, m, k, n, a transposed, b transposed)
    let cases: &[(&str, usize, usize, usize, bool, bool)] = &[
        ("fwd NN 128x512.512x512", 128, 512, 512, false, false),
        ("dx  NT 128x512.(512x512)T", 128, 512, 512, false, true),
        ("dW  TN (128x512)T.128x512", 512, 128, 512, true, false),
        ("sq  NN 2048", 2048, 2048, 2048, false, false),
        ("sq  NN 1024", 1024, 1024, 1024, false, false),
    ];
    for &(name, m, k, n, at, bt) in cases {
        let a = vec![0.5f32; m * k];
        let b = vec![0.25f32; k * n];
        let mut c = vec![0f32; m * n];
        // a is m×k: stored k×m (row-major) when transposed.
        let (ars, acs) = if at { (1isize, m as isize) } else { (k as isize, 1isize) };
        let (brs, bcs) = if bt { (1isize, k as isize) } else { (n as isize, 1isize) };
        let (ap, bp, cp) = (P(a.as_ptr() as *mut f32), P(b.as_ptr() as *mut f32), P(c.as_mut_ptr()));
        let flops = 2.0 * (m * n * k) as f64;
        let target = if m * n * k > 1 << 28 { 1.5 } else { 0.3 };
        let mut variants: Vec<(String, Box<dyn Fn()>)> = vec![
            ("rayon2".into(), Box::new(move || unsafe { gemm_strided(m, k, n, ap.0, ars, acs, bp.0, brs, bcs, cp.0, n, gemm::Parallelism::Rayon(2)) })),
            ("one".into(), Box::new(move || unsafe { gemm_strided(m, k, n, ap.0, ars, acs, bp.0, brs, bcs, cp.0, n, gemm::Parallelism::None) })),
        ];
        variants.push(("mm".into(), Box::new(move || unsafe { matrixmultiply::sgemm(m, k, n, 1.0, ap.0, ars, acs, bp.0, brs, bcs, 0.0, cp.0, n as isize, 1) })));
        variants.push(("mmcols/2".into(), Box::new(move || {
            let chunk = n.div_ceil(2).div_ceil(16) * 16;
            rayon::scope(|s| {
                for t in 0..2 {
                    let c0 = t * chunk;
                    let cols = chunk.min(n.saturating_sub(c0));
                    s.spawn(move |_| {
                        let (ap, bp, cp) = (ap, bp, cp);
                        unsafe { matrixmultiply::sgemm(m, k, cols, 1.0, ap.0, ars, acs, bp.0.offset(c0 as isize * bcs), brs, bcs, 0.0, cp.0.add(c0), n as isize, 1) }
                    });
                }
            });
        })));
        for parts in [2usize, 4, 8] {
            variants.push((format!("rows/{parts}"), Box::new(move || {
                let chunk = m.div_ceil(parts);
                rayon::scope(|s| {
                    for t in 0..parts {
                        let r0 = t * chunk;
                        let rows = chunk.min(m.saturating_sub(r0));
                        if rows == 0 { continue; }
                        s.spawn(move |_| {
                            let (ap, bp, cp) = (ap, bp, cp);
                            unsafe { gemm_strided(rows, k, n, ap.0.offset(r0 as isize * ars), ars, acs, bp.0, brs, bcs, cp.0.add(r0 * n), n, gemm::Parallelism::None) }
                        });
                    }
                });
            })));
            variants.push((format!("cols/{parts}"), Box::new(move || {
                let chunk = n.div_ceil(parts).div_ceil(16) * 16;
                rayon::scope(|s| {
                    for t in 0..parts {
                        let c0 = t * chunk;
                        let cols = chunk.min(n.saturating_sub(c0));
                        if cols == 0 { continue; }
                        s.spawn(move |_| {
                            let (ap, bp, cp) = (ap, bp, cp);
                            unsafe { gemm_strided(m, k, cols, ap.0, ars, acs, bp.0.offset(c0 as isize * bcs), brs, bcs, cp.0.add(c0), n, gemm::Parallelism::None) }
                        });
                    }
                });
            })));
        }
        for (v, f) in &variants {
            let t = time(7, target, f);
            let cpu = CPU_PER_CALL.with(|c| c.get());
            println!("{name:28} {v:8} {:9.1} / {:9.1} us  {:6.1} GFLOP/s  cpu {:6.2}x", t.0 * 1e6, t.1 * 1e6, flops / t.0 / 1e9, cpu / t.1);
        }
    }
}
