//! The engine's side of `make bench` (see docs/bench.md for the JSON contract): prints
//! one JSON object with our figures on stdout; progress on stderr.
//!
//! Every workload mirrors one in `../shared/bench/jax_bench.py` (same shapes, dtypes,
//! work counts and units) and is stored under JAX's part and metric key, so that
//! `parts.<part>.metrics.<key>` here and in JAX's output measure the same thing. Figures
//! only we have (the MLP training step, memory) live under the parts `train` and
//! `memory`. A workload the engine cannot run is `null` with a reason under `notes`.
//!
//! Usage: `bench [--only compile,dispatch,throughput,loops,train,memory] [--quick]`.
//! `bench --child mlp_grad_rss` is the child process that measures peak RSS;
//! `bench --child multidevice [--quick]` the one with 8 devices (part `multidevice`).

use jax::prelude::*;
use jax::transform::pipeline::clear_executable_cache;
use serde_json::{json, Map, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

type Params = Vec<(Array, Array)>;

/// `--key SUBSTRING`: run only the workloads with a key containing it (for debugging).
static KEY_FILTER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

const PARTS: &[&str] = &["compile", "dispatch", "throughput", "loops", "train", "memory", "multidevice"];

/// Settings shared by all parts (JAX's `--reps`, `--compile-reps`).
#[derive(Clone, Copy)]
struct Opts {
    reps: usize,
    compile_reps: usize,
    /// Seconds one workload may spend in its timed loops before repetitions are cut.
    cap_s: f64,
}

// ------------------------------------------------------------------------------------
// metrics (the same fields as jax_bench.py's `metric`)
// ------------------------------------------------------------------------------------

fn unit_scale(unit: &str) -> f64 {
    match unit {
        "s" => 1.0,
        "ms" => 1e3,
        _ => 1e6,
    }
}

/// One metric from per-event times in seconds. `work`: bytes (GB/s) or flops (GFLOP/s).
fn metric(label: &str, samples_s: &[f64], unit: &str, work: Option<(f64, &str)>) -> Map<String, Value> {
    let mut xs = samples_s.to_vec();
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len();
    let med = if n % 2 == 1 { xs[n / 2] } else { 0.5 * (xs[n / 2 - 1] + xs[n / 2]) };
    let sc = unit_scale(unit);
    let mut m = Map::new();
    m.insert("label".into(), json!(label));
    m.insert("unit".into(), json!(unit));
    m.insert("min".into(), json!(xs[0] * sc));
    m.insert("median".into(), json!(med * sc));
    m.insert("max".into(), json!(xs[n - 1] * sc));
    m.insert("n".into(), json!(n));
    m.insert("samples".into(), json!(samples_s.iter().map(|s| (s * sc * 1e6).round() / 1e6).collect::<Vec<_>>()));
    if let Some((w, ru)) = work {
        m.insert("work".into(), json!(w));
        m.insert("rate_unit".into(), json!(ru));
        m.insert("rate_at_min".into(), json!(w / xs[0] / 1e9));
        m.insert("rate_at_median".into(), json!(w / med / 1e9));
    }
    m
}

/// A single measured value (no repetitions), e.g. a memory figure.
fn value_metric(label: &str, v: f64, unit: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("label".into(), json!(label));
    m.insert("unit".into(), json!(unit));
    for k in ["min", "median", "max"] {
        m.insert(k.into(), json!(v));
    }
    m.insert("n".into(), json!(1));
    m
}

/// Minor page faults of this process so far.
fn minflt() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0.0)))
        .unwrap_or(0.0)
}

/// Per-call seconds over `reps` repetitions of `inner` calls (jax_bench.py's `bench`):
/// `warmup` calls, then `inner` chosen so one repetition lasts about `target_s`. A slow
/// workload gets fewer repetitions so that its timed loops stay within `o.cap_s`.
/// Returns (samples, inner, minor page faults per call).
fn bench(o: &Opts, target_s: f64, warmup: usize, mut f: impl FnMut() -> jax::Result<()>) -> jax::Result<(Vec<f64>, usize, f64)> {
    let t0 = Instant::now();
    f()?;
    let first = t0.elapsed().as_secs_f64();
    if first > o.cap_s {
        // Too slow to repeat within the cap: the first call is all we report, n = 1,
        // marked by inner = 0 (callers compile before timing; see docs/bench.md).
        return Ok((vec![first], 0, f64::NAN));
    }
    for _ in 1..warmup {
        f()?;
    }
    // The fastest of up to 3 calls sets `inner` (one call on a busy machine may be a
    // scheduling outlier, which would make `inner` far too small).
    let mut one = f64::INFINITY;
    for k in 0..3 {
        let t0 = Instant::now();
        f()?;
        one = one.min(t0.elapsed().as_secs_f64());
        if k == 0 && one > 0.01 {
            break;
        }
    }
    let inner = ((target_s / one.max(1e-9)) as usize).clamp(1, 200_000);
    let reps = ((o.cap_s / (one * inner as f64)) as usize).clamp(1, o.reps);
    let f0 = minflt();
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..inner {
            f()?;
        }
        out.push(t.elapsed().as_secs_f64() / inner as f64);
    }
    let flt = (minflt() - f0) / (reps * inner) as f64;
    Ok((out, inner, flt))
}

/// A part's metrics and the reasons for the ones it could not measure.
#[derive(Default)]
struct Part {
    metrics: Map<String, Value>,
    notes: Map<String, Value>,
}

impl Part {
    fn put(&mut self, key: &str, m: Map<String, Value>) {
        if m.get("inner").and_then(|v| v.as_u64()) == Some(0) {
            self.notes.insert(key.into(), json!("too slow to repeat within the cap: one call (n = 1)"));
        }
        self.metrics.insert(key.into(), Value::Object(m));
    }
    /// Records `key` as not measured, with the reason.
    fn missing(&mut self, key: &str, why: String) {
        eprintln!("bench:   {key}: NOT MEASURED: {why}");
        self.metrics.insert(key.into(), Value::Null);
        self.notes.insert(key.into(), json!(why));
    }
    /// Runs one workload; an error or a panic records its keys as not measured.
    fn run(&mut self, keys: &[&str], f: impl FnOnce(&mut Part) -> jax::Result<()>) {
        if let Some(want) = KEY_FILTER.get().and_then(|k| k.as_deref()) {
            if !keys.iter().any(|k| k.contains(want)) {
                return;
            }
        }
        eprintln!("bench:   {}", keys[0]);
        let t_start = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| f(self)));
        eprintln!("bench:     {:.1} s", t_start.elapsed().as_secs_f64());
        let why = match r {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("engine error: {}", first_line(&e.to_string())),
            Err(p) => format!(
                "panicked: {}",
                p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
            ),
        };
        for k in keys {
            if !self.metrics.get(*k).is_some_and(|v| !v.is_null()) {
                self.missing(k, why.clone());
            }
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(300).collect()
}

fn ready(a: &Array) -> jax::Result<()> {
    a.block_until_ready().map(|_| ())
}

fn ready_all(xs: &[&Array]) -> jax::Result<()> {
    xs.iter().try_for_each(|a| ready(a))
}

// ------------------------------------------------------------------------------------
// inputs (a fixed xorshift generator; the values do not matter, the shapes do)
// ------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next_u(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal f32 values (Box-Muller) as an array of `shape`.
    fn normal(&mut self, shape: &[usize], scale: f32) -> Array {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                let (u1, u2) = (self.next_u(), self.next_u());
                ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32 * scale
            })
            .collect();
        Array::from_vec(v, shape).expect("shape matches")
    }
}

fn scalar_f32(v: f32) -> Array {
    Array::from_vec(vec![v], &[]).expect("scalar")
}

fn scalar_i32(v: i32) -> Array {
    Array::from_vec(vec![v], &[]).expect("scalar")
}

/// The MLP of jax_bench.py: 3 layers of W f32[512,512] ~ N(0,1)/sqrt(512), b = 0.
fn mlp_params(rng: &mut Rng) -> Params {
    (0..3)
        .map(|_| (rng.normal(&[512, 512], 1.0 / (512f32).sqrt()), Array::from_vec(vec![0f32; 512], &[512]).unwrap()))
        .collect()
}

/// `h = h @ W + b`, relu between layers (none after the last).
fn mlp_fwd(p: &Params, x: &Array) -> jax::Result<Array> {
    let mut h = x.clone();
    for (i, (w, b)) in p.iter().enumerate() {
        h = jnp::matmul(&h, w)? + b;
        if i + 1 < p.len() {
            h = nn::relu(&h)?;
        }
    }
    Ok(h)
}

/// `mean((mlp(p, x) - y) ** 2)`.
fn mlp_loss(p: &Params, x: &Array, y: &Array) -> jax::Result<Array> {
    let d = mlp_fwd(p, x)? - y;
    jnp::mean(&(&d * &d), None)
}

/// `grad(loss)(p, x, y)`: the gradient with respect to the parameters only (x, y are
/// closed over, as `jax.grad`'s default argnums=0).
fn mlp_grad(p: Params, x: Array, y: Array) -> jax::Result<Params> {
    grad(move |p: Params| mlp_loss(&p, &x, &y))(p)
}

/// One SGD step: `p - 0.01 * grad(loss)(p, x, y)`, leaf by leaf.
fn train_step(p: Params, x: Array, y: Array) -> jax::Result<Params> {
    let g = mlp_grad(p.clone(), x, y)?;
    Ok(p.iter().zip(&g).map(|((w, b), (gw, gb))| (w - &(gw * 0.01), b - &(gb * 0.01))).collect())
}

/// The scan of workload (d): `c = c*0.9 + sin(x_i)`, emitting `sum(c)`, over 1000 steps.
fn scan1000(c0: Array, xs: Array) -> jax::Result<(Array, Array)> {
    lax::scan(|(c, xi): (Array, Array)| -> jax::Result<(Array, Array)> {
        let c = c * 0.9 + xi.sin();
        let s = c.sum();
        Ok((c, s))
    }, c0, xs, None, false, 1)
}

// ------------------------------------------------------------------------------------
// part: compile
// ------------------------------------------------------------------------------------

/// The trace / lower / compile / first-exec split of a fresh function with cleared
/// executable cache (each `jit` value has its own trace cache), then a fresh plain call
/// (`first_call_total`), then the steady-state cached call.
fn compile_workload<A: Pytree, R: Pytree + BlockUntilReady + Clone, Ar: Copy + jax::trace::pytree::Args<A>>(
    part: &mut Part,
    o: &Opts,
    name: &str,
    desc: &str,
    make: &dyn Fn() -> Jitted<A, R>,
    args: Ar,
) -> jax::Result<()> {
    let (mut tr, mut lo, mut co, mut ex, mut tot) = (vec![], vec![], vec![], vec![], vec![]);
    let start = Instant::now();
    let mut last = None;
    let mut mlir_lines = 0;
    for r in 0..o.compile_reps {
        if r > 0 && start.elapsed().as_secs_f64() > o.cap_s * 3.0 {
            break;
        }
        clear_executable_cache();
        let f = make();
        let t0 = Instant::now();
        let traced = f.trace(args)?;
        let t1 = Instant::now();
        let lowered = traced.lower()?;
        let t2 = Instant::now();
        let compiled = lowered.compile()?;
        let t3 = Instant::now();
        block_until_ready(compiled.call(args)?)?;
        let t4 = Instant::now();
        if mlir_lines == 0 {
            mlir_lines = lowered.as_text().lines().count();
        }
        tr.push((t1 - t0).as_secs_f64());
        lo.push((t2 - t1).as_secs_f64());
        co.push((t3 - t2).as_secs_f64());
        ex.push((t4 - t3).as_secs_f64());
        clear_executable_cache();
        let f2 = make();
        let t0 = Instant::now();
        block_until_ready(f2.call(args)?)?;
        tot.push(t0.elapsed().as_secs_f64());
        last = Some(f2);
    }
    let f2 = last.expect("at least one repetition");
    // The steady state is the optimised tier (tiered compilation swaps to it in the
    // background from the second call): wait for it before timing cached calls.
    f2.trace(args)?.lower()?.compile()?.wait_optimized(std::time::Duration::from_secs(300));
    let mut m = metric(&format!("{name}: trace"), &tr, "ms", None);
    m.insert("desc".into(), json!(desc));
    part.put(&format!("{name}/trace"), m);
    let mut m = metric(&format!("{name}: lower (jaxpr->MLIR)"), &lo, "ms", None);
    m.insert("mlir_lines".into(), json!(mlir_lines));
    part.put(&format!("{name}/lower"), m);
    part.put(&format!("{name}/compile"), metric(&format!("{name}: MLIR/LLVM compile"), &co, "ms", None));
    part.put(&format!("{name}/first_exec"), metric(&format!("{name}: first execution"), &ex, "ms", None));
    part.put(&format!("{name}/first_call_total"), metric(&format!("{name}: first call total (jit(f)(x))"), &tot, "ms", None));
    let (s, inner, _) = bench(o, 0.05, 2, || block_until_ready(f2.call(args)?).map(|_| ()))?;
    let mut m = metric(&format!("{name}: steady-state call (cached)"), &s, "us", None);
    m.insert("inner".into(), json!(inner));
    part.put(&format!("{name}/steady_exec"), m);
    Ok(())
}

fn split_keys(name: &str) -> Vec<String> {
    ["trace", "lower", "compile", "first_exec", "first_call_total", "steady_exec"].iter().map(|s| format!("{name}/{s}")).collect()
}

fn run_compile_workload<A: Pytree, R: Pytree + BlockUntilReady + Clone, Ar: Copy + jax::trace::pytree::Args<A>>(
    part: &mut Part,
    o: &Opts,
    name: &str,
    desc: &str,
    make: &dyn Fn() -> Jitted<A, R>,
    args: Ar,
) {
    let keys = split_keys(name);
    let keys: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
    part.run(&keys, |p| compile_workload(p, o, name, desc, make, args));
}

fn part_compile(o: &Opts) -> Part {
    let mut part = Part::default();
    // One-time initialisation (as the JAX bench warms up XLA before measuring).
    part.run(&["process_first_jit"], |p| {
        let t0 = Instant::now();
        ready(&jit(|v: Array| v * 3.0 + 1.0).call(&jnp::ones(&[4], DType::F32))?)?;
        p.put("process_first_jit", metric("first jit in process (one-time init incl.)", &[t0.elapsed().as_secs_f64()], "ms", None));
        let w = jnp::ones(&[8, 8], DType::F32);
        let g = jit(|w: Array| grad(|w: Array| jnp::matmul(&w, &w).map(|m| m.tanh().sum()))(w));
        ready(&g.call(&w)?)
    });
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let params = mlp_params(&mut rng);
    let x = rng.normal(&[128, 512], 1.0);
    let y = rng.normal(&[128, 512], 1.0);
    let x1k = jnp::ones(&[1024], DType::F32);
    let c0 = jnp::zeros(&[16], DType::F32);
    let xs = rng.normal(&[1000, 16], 1.0);

    run_compile_workload(&mut part, o, "a_elementwise", "sin(x)*2+1, f32[1024]", &|| jit(|v: Array| v.sin() * 2.0 + 1.0), &x1k);
    run_compile_workload(
        &mut part,
        o,
        "b_mlp_fwd",
        "3-layer MLP fwd, batch 128, width 512, f32",
        &|| jit(|(p, x): (Params, Array)| mlp_fwd(&p, &x)),
        (&params, &x),
    );
    run_compile_workload(
        &mut part,
        o,
        "c_mlp_grad",
        "grad of MSE loss of that MLP wrt params",
        &|| jit(|(p, x, y): (Params, Array, Array)| mlp_grad(p, x, y)),
        (&params, &x, &y),
    );
    run_compile_workload(
        &mut part,
        o,
        "d_scan1000",
        "lax.scan 1000 steps, body c*0.9+sin(x) on f32[16]",
        &|| jit(|(c0, xs): (Array, Array)| scan1000(c0, xs)),
        (&c0, &xs),
    );
    part
}

// ------------------------------------------------------------------------------------
// part: train (the MLP's training step; JAX's figures come from scripts/bench.py)
// ------------------------------------------------------------------------------------

fn part_train(o: &Opts) -> Part {
    let mut part = Part::default();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let params = mlp_params(&mut rng);
    let x = rng.normal(&[128, 512], 1.0);
    let y = rng.normal(&[128, 512], 1.0);
    run_compile_workload(
        &mut part,
        o,
        "mlp_train_step",
        "p - 0.01 * grad(loss)(p, x, y) for the MLP of c_mlp_grad",
        &|| jit(|(p, x, y): (Params, Array, Array)| train_step(p, x, y)),
        (&params, &x, &y),
    );
    part
}

// ------------------------------------------------------------------------------------
// part: dispatch
// ------------------------------------------------------------------------------------

fn part_dispatch(o: &Opts) -> Part {
    let mut part = Part::default();
    let x = jnp::ones(&[8], DType::F32);
    let y = jnp::full(&[8], 2.0, DType::F32);
    let z = jnp::full(&[8], 3.0, DType::F32);
    let xk = jnp::ones(&[1024], DType::F32);
    let f1 = jit(|v: Array| v + 1.0);
    let f3 = jit(|(u, v, w): (Array, Array, Array)| u * v + w);
    let warm = || -> jax::Result<()> {
        ready(&f1.call(&x)?)?;
        ready(&f3.call((&x, &y, &z))?)?;
        ready(&x.sin())?;
        ready(&(&x + &y))?;
        ready(&f1.call(&xk)?)
    };
    if let Err(e) = warm() {
        for k in ["jit_1arg_sync", "jit_1arg_async", "jit_3arg_sync", "jit_3arg_async", "jit_1arg_1k_sync", "jit_1arg_1k_async", "eager_sin_sync", "eager_sin_async", "eager_add_sync"] {
            part.missing(k, format!("engine error: {}", first_line(&e.to_string())));
        }
        return part;
    }
    type Case<'a> = (&'a str, &'a str, Box<dyn Fn() -> jax::Result<()> + 'a>);
    let cases: Vec<Case> = vec![
        ("jit_1arg_sync", "jit f(x)=x+1 f32[8], call+block", Box::new(|| ready(&f1.call(&x)?))),
        ("jit_1arg_async", "jit f(x)=x+1 f32[8], call only", Box::new(|| f1.call(&x).map(|_| ()))),
        ("jit_3arg_sync", "jit f(x,y,z)=x*y+z f32[8], call+block", Box::new(|| ready(&f3.call((&x, &y, &z))?))),
        ("jit_3arg_async", "jit f(x,y,z)=x*y+z f32[8], call only", Box::new(|| f3.call((&x, &y, &z)).map(|_| ()))),
        ("jit_1arg_1k_sync", "jit f(x)=x+1 f32[1024], call+block", Box::new(|| ready(&f1.call(&xk)?))),
        ("jit_1arg_1k_async", "jit f(x)=x+1 f32[1024], call only", Box::new(|| f1.call(&xk).map(|_| ()))),
        ("eager_sin_sync", "eager sin f32[8], call+block", Box::new(|| ready(&x.sin()))),
        ("eager_sin_async", "eager sin f32[8], call only", Box::new(|| { let _ = x.sin(); Ok(()) })),
        ("eager_add_sync", "eager x+y f32[8], call+block", Box::new(|| ready(&(&x + &y)))),
    ];
    for (key, label, f) in &cases {
        part.run(&[key], |p| {
            let (s, inner, _) = bench(o, 0.1, 2, f)?;
            effects_barrier()?;
            let mut m = metric(label, &s, "us", None);
            m.insert("inner".into(), json!(inner));
            p.put(key, m);
            Ok(())
        });
    }
    part
}

// ------------------------------------------------------------------------------------
// part: throughput
// ------------------------------------------------------------------------------------

fn rate_metric(label: &str, s: &[f64], work: f64, rate_unit: &str, inner: usize, flt: f64) -> Map<String, Value> {
    let mut m = metric(label, s, "ms", Some((work, rate_unit)));
    m.insert("inner".into(), json!(inner));
    m.insert("minflt_per_call".into(), json!(flt));
    m
}

/// `f(args)` jitted, called until ready, fresh output each call.
fn run_rate<A: Pytree, Ar: Copy + jax::trace::pytree::Args<A>>(
    part: &mut Part,
    o: &Opts,
    key: &str,
    label: &str,
    f: Jitted<A, Array>,
    args: Ar,
    work: f64,
    rate_unit: &str,
) {
    part.run(&[key], |p| {
        f.lower(args)?.compile()?; // compiled outside the timed calls (executable cache)
        let (s, inner, flt) = bench(o, 0.1, 2, || ready(&f.call(args)?))?;
        p.put(key, rate_metric(label, &s, work, rate_unit, inner, flt));
        Ok(())
    });
}

/// `out = f(v)` written into a donated buffer (the previous output): no fresh
/// allocation per call. Records whether the output really reused the donated buffer.
fn run_donated(part: &mut Part, o: &Opts, key: &str, label: &str, f: fn(&Array) -> jax::Result<Array>, v: &Array, work: f64) {
    part.run(&[key], |p| {
        let jf = jit(move |(vv, _buf): (Array, Array)| f(&vv)).donate_argnums(&[1]);
        let buf = jnp::zeros(&v.shape(), v.dtype());
        jf.lower((v, &buf))?.compile()?; // compiled outside the timed calls
        let p0 = buf.unsafe_buffer_pointer()?;
        let mut st = jf.call((v, &buf))?;
        let aliased = st.unsafe_buffer_pointer()? == p0;
        drop(buf);
        let (s, inner, flt) = bench(o, 0.1, 2, || {
            st = jf.call((v, &st))?;
            ready(&st)
        })?;
        let mut m = rate_metric(label, &s, work, "GB/s", inner, flt);
        m.insert("output_aliased_donated_buffer".into(), json!(aliased));
        p.put(key, m);
        Ok(())
    });
}

fn chain(v: &Array) -> jax::Result<Array> {
    Ok((v * 1.5 + 0.5).tanh() * v)
}

fn scale2(v: &Array) -> jax::Result<Array> {
    Ok(v * 2.0)
}

fn softmax_last(v: &Array) -> jax::Result<Array> {
    nn::softmax(v, -1)
}

fn part_throughput(o: &Opts) -> Part {
    let mut part = Part::default();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let n = 10_000_000usize;
    let x = rng.normal(&[n], 1.0);
    let nb = (2 * 4 * n) as f64;
    run_rate(&mut part, o, "elementwise_chain_1e7", "tanh(x*1.5+0.5)*x f32[1e7] (R+W once)", jit(|v: Array| chain(&v)), &x, nb, "GB/s");
    run_donated(&mut part, o, "elementwise_chain_1e7_donated", "same, output into donated buffer (no page faults)", chain, &x, nb);
    run_rate(&mut part, o, "scale_1e7", "x*2 f32[1e7] (R+W)", jit(|v: Array| v * 2.0), &x, nb, "GB/s");
    run_donated(&mut part, o, "scale_1e7_donated", "x*2 f32[1e7], donated output buffer", scale2, &x, nb);
    let xs = rng.normal(&[1_000_000], 1.0);
    run_rate(&mut part, o, "elementwise_chain_1e6", "tanh(x*1.5+0.5)*x f32[1e6] (4 MB, R+W)", jit(|v: Array| chain(&v)), &xs, 8e6, "GB/s");
    run_rate(&mut part, o, "sum_1e7", "sum f32[1e7] (R)", jit(|v: Array| v.sum()), &x, (4 * n) as f64, "GB/s");
    drop(x);
    let mut prev: Option<(usize, f64)> = None;
    for m in [256usize, 1024, 2048] {
        let key = format!("matmul_{m}");
        // A call of size m costs (m/m_prev)^3 times the previous size's: skip what would
        // take longer than the cap for one call.
        if let Some((pm, ps)) = prev {
            let predicted = ps * (m as f64 / pm as f64).powi(3);
            if predicted > 4.0 * o.cap_s {
                part.missing(&key, format!("too slow: one call would take about {predicted:.0} s (from matmul_{pm})"));
                continue;
            }
        }
        let a = rng.normal(&[m, m], 1.0);
        let b = rng.normal(&[m, m], 1.0);
        let f = jit(|(p, q): (Array, Array)| jnp::matmul(&p, &q));
        run_rate(&mut part, o, &key, &format!("matmul f32 {m}x{m}x{m}"), f, (&a, &b), 2.0 * (m as f64).powi(3), "GFLOP/s");
        prev = part.metrics.get(&key).and_then(|v| v.get("min")).and_then(|v| v.as_f64()).map(|ms| (m, ms / 1e3));
    }
    // GFLOP/s of the largest matmul measured, to skip a batch matmul that would not finish.
    let gemm_rate = prev.map(|(m, s)| 2.0 * (m as f64).powi(3) / s / 1e9);
    for (b, m) in [(16usize, 512usize), (256, 64)] {
        let flops = 2.0 * b as f64 * (m as f64).powi(3);
        if let Some(r) = gemm_rate {
            let predicted = flops / 1e9 / r;
            if predicted > 4.0 * o.cap_s {
                part.missing(&format!("bmm_{b}x{m}"), format!("too slow: one call would take about {predicted:.0} s (at the matmul rate {r:.2} GFLOP/s)"));
                continue;
            }
        }
        let a = rng.normal(&[b, m, m], 1.0);
        let c = rng.normal(&[b, m, m], 1.0);
        let f = jit(|(p, q): (Array, Array)| jnp::matmul(&p, &q));
        run_rate(
            &mut part,
            o,
            &format!("bmm_{b}x{m}"),
            &format!("batch matmul f32 [{b},{m},{m}]@[{b},{m},{m}]"),
            f,
            (&a, &c),
            2.0 * b as f64 * (m as f64).powi(3),
            "GFLOP/s",
        );
    }
    let s = rng.normal(&[4096, 1024], 1.0);
    let sb = (2 * 4 * 4096 * 1024) as f64;
    run_rate(&mut part, o, "softmax_4096x1024", "softmax axis=-1 f32[4096,1024] (R+W once)", jit(|v: Array| softmax_last(&v)), &s, sb, "GB/s");
    run_donated(&mut part, o, "softmax_4096x1024_donated", "softmax, donated output buffer", softmax_last, &s, sb);
    part
}

// ------------------------------------------------------------------------------------
// part: loops
// ------------------------------------------------------------------------------------

/// `optimized`: waits until the case's optimised tier runs (called after the first call).
fn loop_case(part: &mut Part, o: &Opts, key: &str, label: &str, steps: f64, optimized: impl Fn() -> jax::Result<()>, f: impl Fn() -> jax::Result<()>) {
    part.run(&[key], |p| {
        let t0 = Instant::now();
        f()?;
        let first = t0.elapsed().as_secs_f64();
        optimized()?;
        let (s, inner, _) = bench(o, 0.1, 1, &f)?;
        let per: Vec<f64> = s.iter().map(|v| v / steps).collect();
        let mut m = metric(&format!("{label} (per iteration)"), &per, "us", None);
        let mut sorted = s.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        m.insert("inner".into(), json!(inner));
        m.insert("total_ms_median".into(), json!(sorted[sorted.len() / 2] * 1e3));
        m.insert("first_call_ms".into(), json!(first * 1e3));
        p.put(key, m);
        Ok(())
    });
}

fn loop_body(i: Array, c: Array) -> Array {
    c * 0.999 + i.astype(DType::F32).sin() * 1e-3
}

fn part_loops(o: &Opts) -> Part {
    const N: i32 = 10_000;
    let mut part = Part::default();
    let c0 = scalar_f32(1.0);
    let v0 = jnp::ones(&[1024], DType::F32);
    let m0 = jnp::ones(&[16, 16], DType::F32);
    let n_dyn = scalar_i32(N);
    let fori_static = jit(|c: Array| lax::fori_loop(0, N, |(i, c): (Array, Array)| loop_body(i, c), c));
    let fori_dyn = jit(|(c, n): (Array, Array)| lax::fori_loop_dynamic(&scalar_i32(0), &n, |(i, c): (Array, Array)| loop_body(i, c), c));
    let while_l = jit(|c: Array| {
        lax::while_loop(|(i, _c): (Array, Array)| i.lt(N), |(i, c): (Array, Array)| (i + 1, c * 0.999 + 1e-3), (scalar_i32(0), c))
    });
    let fori_vec = jit(|c: Array| lax::fori_loop(0, N, |(_i, v): (Array, Array)| v * 0.999 + 1e-3, c));
    let fori_mm = jit(|m: Array| {
        let w16 = jnp::eye(16, None, 0, DType::F32)? * 0.5;
        lax::fori_loop(0, N, move |(_i, mm): (Array, Array)| jnp::matmul(&mm, &w16).map(|r| r.tanh() + 0.1), m)
    });
    // Time the optimised tier, as a user's steady state: with tiered compilation on (the
    // part runs with it off, see `main`) a first call runs O0 code, so each case waits,
    // after its first call, for its O2 executable (a no-op for an untiered executable).
    let wait = std::time::Duration::from_secs(300);
    let nf = N as f64;
    loop_case(&mut part, o, "fori_static_10k", "fori_loop 10k, static trip, scalar body", nf, || fori_static.lower(&c0)?.compile().map(|c| { c.wait_optimized(wait); }), || ready(&fori_static.call(&c0)?));
    loop_case(&mut part, o, "fori_dynamic_10k", "fori_loop 10k, traced trip count", nf, || fori_dyn.lower((&c0, &n_dyn))?.compile().map(|c| { c.wait_optimized(wait); }), || ready(&fori_dyn.call((&c0, &n_dyn))?));
    loop_case(&mut part, o, "while_10k", "while_loop 10k, scalar (i,c) carry", nf, || while_l.lower(&c0)?.compile().map(|c| { c.wait_optimized(wait); }), || {
        let (i, c) = while_l.call(&c0)?;
        ready_all(&[&i, &c])
    });
    loop_case(&mut part, o, "fori_vec1024_10k", "fori_loop 10k, body on f32[1024]", nf, || fori_vec.lower(&v0)?.compile().map(|c| { c.wait_optimized(wait); }), || ready(&fori_vec.call(&v0)?));
    loop_case(&mut part, o, "fori_matmul16_10k", "fori_loop 10k, body tanh(m@w)+.1, f32[16,16]", nf, || fori_mm.lower(&m0)?.compile().map(|c| { c.wait_optimized(wait); }), || ready(&fori_mm.call(&m0)?));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let c16 = jnp::zeros(&[16], DType::F32);
    let xs = rng.normal(&[1000, 16], 1.0);
    let sc = jit(|(c0, xs): (Array, Array)| scan1000(c0, xs));
    part.run(&["scan1000_exec"], |p| {
        sc.lower((&c16, &xs))?.compile()?.wait_optimized(wait);
        let (s, inner, _) = bench(o, 0.1, 2, || {
            let (c, ys) = sc.call((&c16, &xs))?;
            ready_all(&[&c, &ys])
        })?;
        let per: Vec<f64> = s.iter().map(|v| v / 1000.0).collect();
        let mut m = metric("lax.scan 1000 steps f32[16] (per step)", &per, "us", None);
        m.insert("inner".into(), json!(inner));
        p.put("scan1000_exec", m);
        Ok(())
    });
    part
}

// ------------------------------------------------------------------------------------
// part: memory
// ------------------------------------------------------------------------------------

/// A `/proc/self/status` field in KiB (`VmHWM`, `VmRSS`).
fn status_kib(field: &str) -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok())
}

/// The child process of `memory/mlp_grad_peak_rss`: builds the MLP inputs, then runs the
/// MLP grad benchmark (jit, first call, cached calls: 200, or as many as fit in 10 s) and
/// prints VmHWM before and after.
fn child_mlp_grad_rss() -> jax::Result<Value> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let params = mlp_params(&mut rng);
    let x = rng.normal(&[128, 512], 1.0);
    let y = rng.normal(&[128, 512], 1.0);
    ready_all(&[&x, &y])?;
    let before = status_kib("VmHWM:").unwrap_or(f64::NAN);
    let f = jit(|(p, x, y): (Params, Array, Array)| mlp_grad(p, x, y));
    let t0 = Instant::now();
    let mut calls = 0;
    while calls < 200 && (calls == 0 || t0.elapsed().as_secs_f64() < 10.0) {
        block_until_ready(f.call((&params, &x, &y))?)?;
        calls += 1;
    }
    Ok(json!({"calls": calls, "vmhwm_before_kib": before, "vmhwm_kib": status_kib("VmHWM:"), "vmrss_kib": status_kib("VmRSS:")}))
}

/// Runs this binary again with `args` (a `--child` workload that needs a process of its
/// own: a fresh peak RSS, or devices configured before the backend starts) and parses the
/// JSON it prints. Errors: the child could not start, failed (its last stderr line), or
/// printed no JSON.
fn run_child(args: &[&str]) -> jax::Result<Value> {
    let exe = std::env::current_exe().map_err(|e| jax::Error::value_error(e.to_string()))?;
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| jax::Error::value_error(format!("cannot start the child process: {e}")))?;
    if !out.status.success() {
        return Err(jax::Error::value_error(format!(
            "child process failed ({}): {}",
            out.status,
            first_line(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""))
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| jax::Error::value_error(e.to_string()))
}

fn part_memory(o: &Opts) -> Part {
    let _ = o;
    let mut part = Part::default();
    part.run(&["mlp_grad_peak_rss", "mlp_grad_rss_growth"], |p| {
        let v = run_child(&["--child", "mlp_grad_rss"])?;
        let hwm = v["vmhwm_kib"].as_f64().unwrap_or(f64::NAN);
        let before = v["vmhwm_before_kib"].as_f64().unwrap_or(f64::NAN);
        let mut m = value_metric("peak RSS (VmHWM) of a process running the MLP grad benchmark", hwm / 1024.0, "MiB");
        m.insert("vmhwm_before_workload_mib".into(), json!(before / 1024.0));
        m.insert("calls".into(), v["calls"].clone());
        p.put("mlp_grad_peak_rss", m);
        p.put(
            "mlp_grad_rss_growth",
            value_metric("peak RSS growth during the MLP grad benchmark (VmHWM after - before)", (hwm - before) / 1024.0, "MiB"),
        );
        Ok(())
    });
    part.run(&["rss_growth_100k_calls"], |p| {
        let x = jnp::ones(&[8], DType::F32);
        let f = jit(|v: Array| v + 1.0);
        for _ in 0..1000 {
            ready(&f.call(&x)?)?;
        }
        let r0 = status_kib("VmRSS:").unwrap_or(f64::NAN);
        let t0 = Instant::now();
        for _ in 0..100_000 {
            ready(&f.call(&x)?)?;
        }
        let secs = t0.elapsed().as_secs_f64();
        let r1 = status_kib("VmRSS:").unwrap_or(f64::NAN);
        let mut m = value_metric("RSS growth over 100k calls of a cached jitted x+1 f32[8] (call+block)", (r1 - r0) / 1024.0, "MiB");
        m.insert("rss_before_mib".into(), json!(r0 / 1024.0));
        m.insert("rss_after_mib".into(), json!(r1 / 1024.0));
        m.insert("loop_s".into(), json!(secs));
        p.put("rss_growth_100k_calls", m);
        Ok(())
    });
    part
}

// ------------------------------------------------------------------------------------
// part: multidevice (8 devices: a child process, as jax_bench.py runs JAX's with
// XLA_FLAGS=--xla_force_host_platform_device_count=8)
// ------------------------------------------------------------------------------------

/// The child of part `multidevice`: 8 devices, `jit(shard_map(psum))` over f32[8, 1e6]
/// sharded by rows (JAX's `shard_map_psum` workload), first call and steady state; a
/// 2048 matmul with A row-sharded (`sharded_matmul_2048`) and the same on one device.
/// Prints `{"metrics": {..}}`.
fn child_multidevice() -> jax::Result<Value> {
    let quick = std::env::args().any(|a| a == "--quick");
    let o = if quick { Opts { reps: 3, compile_reps: 3, cap_s: 1.0 } } else { Opts { reps: 7, compile_reps: 5, cap_s: 3.0 } };
    jax::config::update_int("jax_num_cpu_devices", 8)?;
    let ndev = device_count();
    let mesh = make_mesh(&[ndev], &["i"], None)?;
    let mut rng = Rng(0x5EED);
    let x = rng.normal(&[ndev, 1_000_000], 1.0);
    let xs = device_put(&x, NamedSharding::new(&mesh, P!("i"))?)?;
    block_until_ready(xs.clone())?;
    let make = || {
        let m = mesh.clone();
        jit(move |b: Array| shard_map(|b: Array| lax::psum(&b, "i"), Some(&m), P!("i"), P!()).call(b))
    };
    // Each repetition a fresh jit with the executable cache cleared (as `compile_workload`),
    // so a first call is a trace, a compile and a run, not a cache hit.
    let mut firsts = vec![];
    let mut last = None;
    for _ in 0..o.compile_reps {
        clear_executable_cache();
        let f = make();
        let t0 = Instant::now();
        block_until_ready(f.call(&xs)?)?;
        firsts.push(t0.elapsed().as_secs_f64());
        last = Some(f);
    }
    let f = last.unwrap_or_else(make);
    let mut metrics = Map::new();
    metrics.insert("shard_map_psum/first_call".into(), Value::Object(metric("shard_map psum: first call (trace+compile+run)", &firsts, "ms", None)));
    let (s, inner, _) = bench(&o, 0.1, 1, || block_until_ready(f.call(&xs)?).map(|_| ()))?;
    let mut m = metric(
        &format!("shard_map psum f32[{ndev},1e6] over {ndev} CPU devices"),
        &s,
        "ms",
        Some((4.0 * ndev as f64 * 1e6, "GB/s(input)")),
    );
    m.insert("inner".into(), json!(inner));
    metrics.insert("shard_map_psum".into(), Value::Object(m));
    // JAX's `sharded_matmul_2048`: jit(p @ q, out_shardings=P("i", None)) with A row-sharded
    // and B replicated (the partitioner: one local [256,2048]x[2048,2048] matmul per device).
    let m = 2048;
    let a = rng.normal(&[m, m], 1.0);
    let b = rng.normal(&[m, m], 1.0);
    let a_s = device_put(&a, NamedSharding::new(&mesh, P!("i", None))?)?;
    let b_s = device_put(&b, NamedSharding::new(&mesh, P!())?)?;
    block_until_ready(a_s.clone())?;
    block_until_ready(b_s.clone())?;
    let out = NamedSharding::new(&mesh, P!("i", None))?;
    let make_mm = || jit(|(p, q): (Array, Array)| p.matmul(&q)).out_shardings(vec![out.clone()]);
    let mut firsts = vec![];
    let mut last = None;
    for _ in 0..o.compile_reps {
        clear_executable_cache();
        let f = make_mm();
        let t0 = Instant::now();
        block_until_ready(f.call((&a_s, &b_s))?)?;
        firsts.push(t0.elapsed().as_secs_f64());
        last = Some(f);
    }
    let mm = last.unwrap_or_else(make_mm);
    metrics.insert("sharded_matmul_2048/first_call".into(), Value::Object(metric("sharded matmul: first call (trace+compile+run)", &firsts, "ms", None)));
    let flops = 2.0 * (m as f64).powi(3);
    let (s, inner, _) = bench(&o, 0.2, 1, || block_until_ready(mm.call((&a_s, &b_s))?).map(|_| ()))?;
    let mut mt = metric(&format!("jit matmul 2048^3, A row-sharded over {ndev} devices"), &s, "ms", Some((flops, "GFLOP/s")));
    mt.insert("inner".into(), json!(inner));
    mt.insert("first_call_ms".into(), json!(firsts.first().copied().unwrap_or(f64::NAN) * 1e3));
    metrics.insert("sharded_matmul_2048".into(), Value::Object(mt));
    let mm1 = jit(|(p, q): (Array, Array)| p.matmul(&q));
    block_until_ready(mm1.call((&a, &b))?)?;
    let (s, inner, _) = bench(&o, 0.2, 1, || block_until_ready(mm1.call((&a, &b))?).map(|_| ()))?;
    let mut m1 = metric("same matmul on 1 device (in the 8-device process)", &s, "ms", Some((flops, "GFLOP/s")));
    m1.insert("inner".into(), json!(inner));
    metrics.insert("single_device_matmul_2048_in_8dev_proc".into(), Value::Object(m1));
    Ok(json!({"metrics": metrics, "n_devices": ndev}))
}

fn part_multidevice(o: &Opts) -> Part {
    let mut part = Part::default();
    part.run(&["shard_map_psum", "shard_map_psum/first_call", "sharded_matmul_2048", "sharded_matmul_2048/first_call", "single_device_matmul_2048_in_8dev_proc"], |p| {
        let mut args = vec!["--child", "multidevice"];
        if o.cap_s < 3.0 {
            args.push("--quick");
        }
        let v = run_child(&args)?;
        if let Some(ms) = v["metrics"].as_object() {
            for (k, m) in ms {
                if let Some(m) = m.as_object() {
                    p.put(k, m.clone());
                }
            }
        }
        Ok(())
    });
    part
}

// ------------------------------------------------------------------------------------

fn loadavg() -> Value {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| json!(s.split_whitespace().take(3).filter_map(|v| v.parse::<f64>().ok()).collect::<Vec<_>>()))
        .unwrap_or(Value::Null)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: bench [--only PART,...] [--quick] [--key KEY]\n  parts: {}\n  prints one JSON object (schema jaxrepl-bench/2, docs/bench.md); `make bench` runs it beside JAX", PARTS.join(","));
        return;
    }
    if let Some(bad) = args.iter().skip(1).find(|a| a.starts_with('-') && !["--child", "--quick", "--key", "--only"].contains(&a.as_str())) {
        eprintln!("bench: unknown option {bad:?} (--help lists the options)");
        std::process::exit(2);
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let r = match args.get(i + 1).map(|s| s.as_str()) {
            Some("mlp_grad_rss") => child_mlp_grad_rss(),
            Some("multidevice") => child_multidevice(),
            other => Err(jax::Error::value_error(format!("unknown child {other:?}"))),
        };
        match r {
            Ok(v) => println!("{v}"),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let _ = KEY_FILTER.set(args.iter().position(|a| a == "--key").and_then(|i| args.get(i + 1).cloned()));
    let only: Vec<String> = match args.iter().position(|a| a == "--only") {
        Some(i) => args.get(i + 1).map(|s| s.split(',').map(String::from).collect()).unwrap_or_default(),
        None => PARTS.iter().map(|s| s.to_string()).collect(),
    };
    if let Some(bad) = only.iter().find(|p| !PARTS.contains(&p.as_str())) {
        eprintln!("bench: unknown part {bad:?}; parts: {}", PARTS.join(","));
        std::process::exit(2);
    }
    let o = if quick { Opts { reps: 3, compile_reps: 3, cap_s: 1.0 } } else { Opts { reps: 7, compile_reps: 5, cap_s: 3.0 } };
    let t_all = Instant::now();
    let mut parts = Map::new();
    let tiered = jax::config::read("jaxrepl_tiered_compilation").unwrap_or(false);
    for name in PARTS.iter().filter(|p| only.iter().any(|o| o == *p)) {
        eprintln!("bench: part {name}");
        // Tiered compilation serves first calls: the parts that time first calls keep it
        // (as configured); the steady-state parts compile optimised at once.
        let _ = jax::config::update("jaxrepl_tiered_compilation", tiered && matches!(*name, "compile" | "train"));
        let lb = loadavg();
        let t0 = Instant::now();
        let part = match *name {
            "compile" => part_compile(&o),
            "dispatch" => part_dispatch(&o),
            "throughput" => part_throughput(&o),
            "loops" => part_loops(&o),
            "train" => part_train(&o),
            "multidevice" => part_multidevice(&o),
            _ => part_memory(&o),
        };
        parts.insert(
            name.to_string(),
            json!({"metrics": part.metrics, "notes": part.notes, "load_before": lb, "load_after": loadavg(),
                   "part_wall_s": t0.elapsed().as_secs_f64()}),
        );
    }
    println!(
        "{}",
        json!({"schema": "jaxrepl-bench/2", "parts": parts, "quick": quick, "total_wall_s": t_all.elapsed().as_secs_f64(),
               "engine_version": env!("CARGO_PKG_VERSION")})
    );
}
