//! Magics (`%jaxpr CALL`, `%timeit CALL`, ...): the session rewrites a magic line into a
//! call of one of these functions with the user's expression as a closure, evaluated in
//! the evaluation child. One mechanism for every magic; a method call reaches the same
//! stage API.

use crate::error::{Error, Result};
use crate::interactive::{Text, TextRepr};
use crate::ir::ClosedJaxpr;
use crate::runtime::dispatch;
use crate::trace::Array;
use crate::transform::jit::CacheEntry;
use crate::transform::pipeline::CompiledArtifacts;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

thread_local! {
    static LAST_CALL: RefCell<Option<(String, Arc<CacheEntry>)>> = const { RefCell::new(None) };
    /// The first error a jitted call returned while a magic waited for a call.
    static LAST_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
    /// Depth of magics waiting for a call (`last_call`): calls are only recorded then.
    static CAPTURING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The partitioned program texts of the last recorded call, when it ran partitioned:
    /// (`%compile`'s, `%lower`'s).
    static LAST_PARTITIONED: RefCell<Option<crate::partition::CallTexts>> = const { RefCell::new(None) };
    /// The last call's jaxpr with its arguments' types, when they are sharded over an
    /// explicit mesh or in pinned host memory (`%jaxpr` shows `f32[8@x]`).
    static LAST_TYPED: RefCell<Option<ClosedJaxpr>> = const { RefCell::new(None) };
    /// The last call's lowered text with its results laid out as its `out_shardings` ask
    /// (Shardy annotations on the out shardings' mesh), when it has named ones.
    static LAST_LOWERED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records the lowered text `%lower` shows for the jitted call being made, when its
/// `out_shardings` lay its results out on a mesh (`None`: the usual text).
pub(crate) fn note_lowered(text: Option<String>) {
    if capturing() {
        LAST_LOWERED.with(|c| *c.borrow_mut() = text);
    }
}

/// Records the typed jaxpr of the jitted call being made (`None`: plain types); `%jaxpr`
/// shows it.
pub(crate) fn note_typed(typed: Option<ClosedJaxpr>) {
    if capturing() {
        LAST_TYPED.with(|c| *c.borrow_mut() = typed);
    }
}

/// Whether a magic is waiting for a call (calls then record what magics show).
pub(crate) fn capturing() -> bool {
    CAPTURING.with(|c| c.get()) > 0
}

/// Records the per-device program text of the last jitted call (`None`: it did not run
/// partitioned); `%compile` shows it instead of the whole program's module.
pub(crate) fn note_partitioned(text: Option<crate::partition::CallTexts>) {
    if capturing() {
        LAST_PARTITIONED.with(|c| *c.borrow_mut() = text);
    }
}

fn take_partitioned() -> Option<crate::partition::CallTexts> {
    LAST_PARTITIONED.with(|c| c.borrow_mut().take())
}

/// Records the last jitted call's trace entry (used by `%jaxpr`, `%lower`, ...).
pub(crate) fn note_call(name: &str, entry: &Arc<CacheEntry>) {
    if CAPTURING.with(|c| c.get()) == 0 {
        return;
    }
    LAST_CALL.with(|c| *c.borrow_mut() = Some((name.to_string(), entry.clone())));
    LAST_LOWERED.with(|c| *c.borrow_mut() = None);
}

/// Records the error a jitted call returned (kept only while a magic waits for a call, and
/// only the first: an outer call failing because an inner one did keeps the inner error).
pub(crate) fn note_error(e: &Error) {
    if CAPTURING.with(|c| c.get()) == 0 {
        return;
    }
    LAST_ERROR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(e.clone());
        }
    });
}

/// Runs `f` and returns the jitted call it made. Errors: the error of that call when it
/// failed before it was traced (e.g. a shape error in the function: the same error the
/// call alone gives), else `ValueError` when `f` made no jitted call.
fn last_call<T>(f: impl FnOnce() -> T) -> Result<(String, Arc<CacheEntry>)> {
    LAST_CALL.with(|c| *c.borrow_mut() = None);
    LAST_ERROR.with(|c| *c.borrow_mut() = None);
    LAST_PARTITIONED.with(|c| *c.borrow_mut() = None);
    LAST_TYPED.with(|c| *c.borrow_mut() = None);
    struct Capture;
    impl Drop for Capture {
        fn drop(&mut self) {
            CAPTURING.with(|c| c.set(c.get() - 1));
        }
    }
    CAPTURING.with(|c| c.set(c.get() + 1));
    let guard = Capture; // also ends the capture if `f` panics
    let _ = f();
    drop(guard);
    let failed = LAST_ERROR.with(|c| c.borrow_mut().take());
    let call = LAST_CALL.with(|c| c.borrow_mut().take());
    if let (None, Some(e)) = (&call, failed) {
        return Err(e);
    }
    call.ok_or_else(|| {
        Error::value_error(
            "the expression made no jitted call; magics inspect a call such as `f.call(&x)` where `f = jit(...)`",
        )
    })
}

fn compiled(entry: &CacheEntry) -> Result<&CompiledArtifacts> {
    entry.compiled.get().ok_or_else(|| {
        if entry.has_shard_map {
            Error::value_error(
                "this call of shard_map ran equation by equation (its body per device; not compiled as one program): \
                 the partitioner could not take it (arguments sharded on another mesh, donation, effects, or callbacks, \
                 nested shard_map or collectives inside control flow in the body); %jaxpr shows its jaxpr",
            )
        } else {
            Error::runtime("the call did not compile (did it fail before running?)")
        }
    })
}

/// `%jaxpr CALL`: the jaxpr of the jitted function that `CALL` runs.
pub fn jaxpr<T>(call: impl FnOnce() -> T) -> Result<ClosedJaxpr> {
    let (_, e) = last_call(call)?;
    // The typed jaxpr when it is this call's (same jaxpr), else the entry's.
    match LAST_TYPED.with(|c| c.borrow_mut().take()) {
        Some(t) if t.jaxpr == e.jaxpr.jaxpr => Ok(t),
        _ => Ok(e.jaxpr.clone()),
    }
}

/// `%lower CALL`: the lowered MLIR module. A call on sharded arrays that ran partitioned
/// shows the global module as JAX does: Shardy annotations on `@main` (`mhlo.num_partitions`,
/// `sdy.mesh`, each argument's and result's `sdy.sharding`) and each `shard_map` one
/// `sdy.manual_computation` region (in/out shardings, manual axes, the body on blocks with
/// its collectives as StableHLO ops); `%compile` shows the per-device segments that run.
pub fn lower<T>(call: impl FnOnce() -> T) -> Result<Text> {
    let (name, e) = last_call(call)?;
    if let Some(t) = LAST_LOWERED.with(|c| c.borrow_mut().take()) {
        return Ok(Text(t));
    }
    if let Some(t) = take_partitioned() {
        return Ok(Text(t.lowered));
    }
    if e.compiled.get().is_none() && e.has_shard_map {
        // Ran equation by equation (e.g. `shard_map`s over several meshes): the global
        // module still lowers for display, each mesh its own `sdy.mesh` symbol.
        if let Some(t) = shard_map_display_module(&name, &e) {
            return Ok(Text(t));
        }
    }
    Ok(Text(compiled(&e)?.lowered.text.clone()))
}

/// The display module of a `shard_map` program that ran equation by equation: each
/// `shard_map` one `sdy.manual_computation` (its mesh declared as `sdy.mesh @mesh`,
/// `@mesh_0`, ...), Shardy annotations on `@main` for the first mesh.
fn shard_map_display_module(name: &str, e: &CacheEntry) -> Option<String> {
    let m = crate::transform::pipeline::lower_closed(&e.jaxpr, name, &Default::default()).ok()?;
    Some(match crate::sharding_rules::annotations(&e.jaxpr, &vec![None; e.jaxpr.jaxpr.invars.len()]) {
        Some(a) => crate::sharding_rules::annotate_text(&m.text, &a),
        None => m.text,
    })
}

/// `%compile`'s text for a `shard_map` program that ran equation by equation (no single
/// compiled program): why, then each `shard_map`'s mesh and per-device body.
fn shard_map_per_equation_text(e: &CacheEntry) -> String {
    let sms: Vec<&crate::ir::ShardMapParams> = e.jaxpr.jaxpr.eqns.iter().filter_map(|q| match &q.primitive {
        crate::ir::Primitive::ShardMap(sm) => Some(&**sm),
        _ => None,
    }).collect();
    let mut meshes: Vec<&crate::sharding::Mesh> = vec![];
    for sm in &sms {
        if !meshes.contains(&&sm.mesh) {
            meshes.push(&sm.mesh);
        }
    }
    let why = if meshes.len() > 1 {
        format!("its shard_maps are over {} meshes (the partitioner runs one mesh per program)", meshes.len())
    } else {
        "the partitioner could not take it (arguments sharded on another mesh, donation, effects, or callbacks, nested shard_map or collectives inside control flow in the body)".to_string()
    };
    let mut t = format!("// jaxrepl: this call ran equation by equation: {why}; each shard_map runs its body per device on its mesh\n");
    for (k, sm) in sms.iter().enumerate() {
        t.push_str(&format!("// shard_map {} on {}, in_specs={:?} out_specs={:?}: per-device body\n{}\n", k + 1, sm.mesh, sm.in_specs, sm.out_specs, sm.jaxpr));
    }
    t
}

/// `%compile CALL`: the optimized module after the compile pipeline. A call on sharded
/// arrays that ran partitioned shows its per-device program with the collectives and
/// each compiled segment (as `Compiled::as_text`).
pub fn compile<T>(call: impl FnOnce() -> T) -> Result<Text> {
    let (_, e) = last_call(call)?;
    if let Some(t) = take_partitioned() {
        return Ok(Text(t.compiled));
    }
    if e.compiled.get().is_none() && e.has_shard_map {
        return Ok(Text(shard_map_per_equation_text(&e)));
    }
    Ok(Text(compiled(&e)?.executable.optimized_ir().to_string()))
}

/// `%compile --stage NAME CALL`: one stage's text of the compiled function (`jaxpr`,
/// `lowered`, `opt`, `llvm`, `asm`; see `Stage`). Errors: unknown stage name (listing the
/// stages), translation or code generation failures.
pub fn compile_stage<T>(stage: &str, call: impl FnOnce() -> T) -> Result<Text> {
    let stage: crate::transform::Stage = stage.parse()?;
    let (_, e) = last_call(call)?;
    let partitioned = take_partitioned();
    use crate::transform::Stage;
    if e.has_shard_map {
        // No whole-program module: the per-device segments are the program.
        return match (stage, partitioned) {
            (Stage::Jaxpr, _) => Ok(Text(e.jaxpr.to_string())),
            (Stage::Lowered, Some(t)) => Ok(Text(t.lowered)),
            (Stage::Optimized, Some(t)) => Ok(Text(t.compiled)),
            _ => Err(Error::value_error(format!(
                "%compile --stage {}: a call of shard_map compiles per-device segments; stages jaxpr, lowered and opt show them",
                stage.name()
            ))),
        };
    }
    let c = compiled(&e)?;
    Ok(Text(match (stage, partitioned) {
        (Stage::Lowered, Some(t)) => t.lowered,
        (Stage::Optimized, Some(t)) => t.compiled,
        (stage, _) => match stage {
            Stage::Jaxpr => e.jaxpr.to_string(),
            Stage::Lowered => c.lowered.text.clone(),
            Stage::Optimized => c.executable.optimized_ir().to_string(),
            Stage::Llvm => c.executable.llvm_ir()?,
            // Jitted calls compile at the default level.
            Stage::Asm => c.executable.assembly(2)?,
        },
    }))
}

/// `%diff-passes CALL`: the compile pipelines run pass by pass on CALL's lowered module,
/// with a unified diff of the IR for every pass that changed it (beyond JAX).
pub fn diff_passes<T>(call: impl FnOnce() -> T) -> Result<Text> {
    let (_, e) = last_call(call)?;
    Ok(Text(crate::compile::diff_passes(&compiled(&e)?.lowered)?.to_string()))
}

/// `%cost CALL`: cost and memory analysis of the compiled function. A call of a
/// `shard_map` that ran partitioned shows the cost of the per-device program (what each
/// device runs, as XLA's analysis of an SPMD program is per device; collectives' combines
/// counted, `partition::per_device_cost`) and the total over the mesh's devices.
pub fn cost<T>(call: impl FnOnce() -> T) -> Result<Text> {
    let (name, e) = last_call(call)?;
    if e.has_shard_map {
        let Some(t) = take_partitioned() else {
            compiled(&e)?; // the error saying why it ran equation by equation
            return Err(Error::value_error("%cost: this call of shard_map did not run partitioned"));
        };
        let n = t.devices as f64;
        let total = crate::compile::CostAnalysis { flops: t.cost.flops * n, transcendentals: t.cost.transcendentals * n, bytes_accessed: t.cost.bytes_accessed * n };
        return Ok(Text(format!("jit({name}) per device (each of {} devices runs the per-device program)\n{}\ntotal over {} devices\n{total}", t.devices, t.cost, t.devices)));
    }
    let c = compiled(&e)?;
    let cost = crate::compile::cost_analysis(&e.jaxpr.jaxpr);
    let mut mem = crate::compile::memory_analysis(&c.lowered);
    mem.temp_size_in_bytes = crate::compile::temp_bytes(c.executable.optimized_ir());
    mem.generated_code_size_in_bytes = c.executable.code_size(2).unwrap_or(0);
    Ok(Text(format!("jit({name})\n{cost}\n{mem}")))
}

/// Values `%time`/`%timeit` can wait for.
pub trait BlockUntilReady {
    /// Waits for every array in the value. Errors: the computation's error.
    fn block(&self) -> Result<()>;
}
impl BlockUntilReady for Array {
    /// A sharded array waits for its shards (as JAX: the whole value is not assembled).
    fn block(&self) -> Result<()> {
        if let Some(sh) = self.device().and_then(|d| d.sharded_info()).filter(|sh| sh.gather_on_wait && sh.shards.get().is_some()) {
            return sh.wait_shards();
        }
        self.buffer().map(|_| ())
    }
}
impl<T: BlockUntilReady> BlockUntilReady for Result<T> {
    fn block(&self) -> Result<()> {
        match self {
            Ok(v) => v.block(),
            Err(e) => Err(e.clone()),
        }
    }
}
impl<T: BlockUntilReady> BlockUntilReady for Vec<T> {
    fn block(&self) -> Result<()> {
        self.iter().try_for_each(|x| x.block())
    }
}
impl<A: BlockUntilReady, B: BlockUntilReady> BlockUntilReady for (A, B) {
    fn block(&self) -> Result<()> {
        self.0.block()?;
        self.1.block()
    }
}
impl<A: BlockUntilReady, B: BlockUntilReady, C: BlockUntilReady> BlockUntilReady for (A, B, C) {
    fn block(&self) -> Result<()> {
        self.0.block()?;
        self.1.block()?;
        self.2.block()
    }
}
macro_rules! ready_now {
    ($($t:ty),+) => {$( impl BlockUntilReady for $t { fn block(&self) -> Result<()> { Ok(()) } } )+};
}
ready_now!((), f32, f64, i32, i64, usize, bool, String, ClosedJaxpr);

/// `jax.block_until_ready(x)`: waits for every array in `x` and returns it.
pub fn block_until_ready<T: BlockUntilReady>(x: T) -> Result<T> {
    x.block()?;
    Ok(x)
}

/// Formats seconds like IPython: `1.23 s`, `4.56 ms`, `7.89 µs`, `12 ns`.
pub fn format_time(s: f64) -> String {
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else if s >= 1e-6 {
        (s * 1e6, "µs")
    } else {
        (s * 1e9, "ns")
    };
    let digits = if v >= 100.0 { 0 } else if v >= 10.0 { 1 } else { 2 };
    format!("{v:.digits$} {unit}")
}

/// `%time CALL`: runs once, waits for the result, prints the wall time.
pub fn time<T: BlockUntilReady>(call: impl FnOnce() -> T) -> Result<Text> {
    let t0 = Instant::now();
    let v = call();
    v.block()?;
    let wall = t0.elapsed().as_secs_f64();
    Ok(Text(format!("Wall time: {}", format_time(wall))))
}

/// Timing of `%timeit`: mean and standard deviation per loop (seconds).
#[derive(Clone, Debug)]
pub struct TimeitResult {
    pub mean: f64,
    pub std: f64,
    pub loops: usize,
    pub runs: usize,
}

impl std::fmt::Display for TimeitResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ± {} per loop (mean ± std. dev. of {} runs, {} loop{} each)",
            format_time(self.mean),
            format_time(self.std),
            self.runs,
            group_thousands(self.loops),
            if self.loops == 1 { "" } else { "s" }
        )
    }
}

fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Measures `call` like IPython's `%timeit`: picks the loop count (1, 2, 5, 10, ...)
/// so one run takes ≥ 0.2 s, then 7 runs; every call waits for its result.
/// Errors: the first error the call returns, `KeyboardInterrupt`.
pub fn timeit_result<T: BlockUntilReady>(call: impl Fn() -> T) -> Result<TimeitResult> {
    let run = |n: usize| -> Result<f64> {
        let t0 = Instant::now();
        for _ in 0..n {
            call().block()?;
            if crate::runtime::interrupt::take_if_set() {
                return Err(Error::interrupted());
            }
        }
        Ok(t0.elapsed().as_secs_f64())
    };
    run(1)?; // warm-up (traces and compiles)
    let mut loops = 1usize;
    'outer: for base in [1usize, 10, 100, 1_000, 10_000, 100_000, 1_000_000] {
        for m in [1, 2, 5] {
            loops = base * m;
            if run(loops)? >= 0.2 || Duration::from_secs_f64(0.2).is_zero() {
                break 'outer;
            }
        }
    }
    let runs = 7;
    let per: Vec<f64> = (0..runs).map(|_| run(loops).map(|t| t / loops as f64)).collect::<Result<_>>()?;
    let mean = per.iter().sum::<f64>() / runs as f64;
    let std = (per.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / runs as f64).sqrt();
    Ok(TimeitResult { mean, std, loops, runs })
}

/// `%timeit CALL`.
pub fn timeit<T: BlockUntilReady>(call: impl Fn() -> T) -> Result<Text> {
    Ok(Text(timeit_result(call)?.to_string()))
}

// --- profiling and memory (`%profile`, `%memory`) ---

/// What `%profile CALL` shows: the summary table as text (terminal) and the timeline as
/// SVG (Jupyter).
#[derive(Clone, Debug)]
pub struct ProfileView(pub crate::profiler::Profile);

impl TextRepr for ProfileView {
    fn text_repr(&self) -> String {
        crate::profiler::summary_table(&self.0)
    }
    fn rich(&self) -> Vec<(&'static str, String)> {
        match crate::profiler::svg_timeline(&self.0) {
            Ok(svg) => vec![("image/svg+xml", svg)],
            Err(_) => Vec::new(), // the table still shows
        }
    }
}

/// `%profile CALL`: runs CALL once under the profiler (waiting for its result) and shows
/// the timeline of what ran: tracing, lowering, compiling, executions on each thread,
/// transfers, annotations. Errors: a profile is already running; CALL's error.
pub fn profile<T: BlockUntilReady>(call: impl FnOnce() -> T) -> Result<ProfileView> {
    let (r, p) = crate::profiler::profile(|| call().block())?;
    r?;
    Ok(ProfileView(p))
}

/// `%memory`: the device's allocator statistics (`memory_stats()`, JAX's keys) and the
/// live buffers by allocation site.
pub fn memory() -> Text {
    let s = crate::runtime::memory::memory_stats();
    let mut t = String::from("memory_stats():\n");
    for (k, v) in s.items() {
        let shown = match v.parse::<usize>() {
            Ok(b) if k.contains("bytes") || k.contains("size") => {
                format!("{v} ({})", crate::runtime::memory::format_bytes(b))
            }
            _ => v,
        };
        t.push_str(&format!("  {k:<20} {shown}\n"));
    }
    t.push_str("live buffers by site:\n");
    t.push_str(&crate::runtime::memory::live_table(&crate::runtime::memory::live_by_site()));
    Text(t)
}

/// `%explain`: for recent calls that traced or compiled, each cache layer's verdict.
pub fn explain() -> Text {
    Text(crate::transform::explain::report(&crate::transform::explain::recent()))
}

/// `%eqn-count CALL`: how many equations each source line of the jitted function CALL
/// runs staged (sub-jaxprs included), most first: where a trace's size comes from
/// (JAX's `eqn_count_pprof` dump as a table).
pub fn eqn_counts<T>(call: impl FnOnce() -> T) -> Result<Text> {
    let (name, e) = last_call(call)?;
    Ok(Text(crate::debug::eqn_counts(&format!("jit({name})"), &e.jaxpr.jaxpr).to_string()))
}

/// `jax.effects_barrier()`: waits for all dispatched work (and its printed output).
pub fn effects_barrier() -> Result<()> {
    dispatch::barrier()
}

/// `%precision [VALUE]`: with no value, shows `jax_default_matmul_precision`; with a
/// value (`highest`, `high`, `default`, `bfloat16_3x`, a preset name such as
/// `BF16_BF16_F32`, or `none`), sets it process-wide and shows the new value.
/// Errors: `ValueError` for an unknown name.
pub fn precision(value: &str) -> Result<Text> {
    if !value.trim().is_empty() {
        crate::lax::precision::set_from_str(value)?;
    }
    let shown = match crate::lax::precision::default_matmul_precision() {
        None => "None".to_string(),
        Some(p) => p.short(),
    };
    Ok(Text(format!(
        "jax_default_matmul_precision = {shown}\n\
         (on CPU the levels DEFAULT/HIGH/HIGHEST compute in the operands' precision; presets such as \
         BF16_BF16_F32 are emulated: `%precision compare CALL` shows their error)"
    )))
}

/// What `%precision compare` accepts as the call's result: an array or a `Result` of one.
pub trait CompareOutput {
    /// The array. Errors: the call's error.
    fn into_array(self) -> Result<Array>;
}
impl CompareOutput for Array {
    fn into_array(self) -> Result<Array> {
        Ok(self)
    }
}
impl CompareOutput for Result<Array> {
    fn into_array(self) -> Result<Array> {
        self
    }
}

/// The presets `%precision compare` runs, after the `F64_F64_F64` reference.
pub const COMPARED_PRESETS: &[&str] = &[
    "DEFAULT",
    "F32_F32_F32",
    "TF32_TF32_F32_X3",
    "BF16_BF16_F32_X9",
    "BF16_BF16_F32_X6",
    "BF16_BF16_F32_X3",
    "TF32_TF32_F32",
    "F16_F16_F32",
    "BF16_BF16_F32",
];

/// One row of `%precision compare`: the precision, the error against the reference
/// (`max|y - ref| / max|ref|`, over all elements) and the fastest of a few timed calls
/// (seconds; the first, compiling call is not timed).
#[derive(Clone, Debug)]
pub struct PrecisionRow {
    pub precision: String,
    pub max_rel_error: f64,
    pub secs: f64,
}

/// Runs `call` with `jax_default_matmul_precision` set to `F64_F64_F64` (the reference:
/// every product accumulated in f64) and then to each of [`COMPARED_PRESETS`]; returns
/// one row per preset. Only contractions at the default precision change (an explicit
/// `precision=` in the call wins). Errors: the call's first error.
pub fn precision_compare_rows<T: CompareOutput>(call: impl Fn() -> T) -> Result<Vec<PrecisionRow>> {
    let run = |p: &str| -> Result<(Vec<f64>, f64)> {
        let _g = crate::lax::precision::with_default_matmul_precision(if p == "DEFAULT" { None } else { Some(crate::ir::DotPrecision::parse(p)?) })?;
        let y = call().into_array()?; // compiles
        let v = y.buffer()?.to_f64_vec();
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t0 = Instant::now();
            call().into_array()?.block()?;
            best = best.min(t0.elapsed().as_secs_f64());
            if crate::runtime::interrupt::take_if_set() {
                return Err(Error::interrupted());
            }
        }
        Ok((v, best))
    };
    let (reference, ref_secs) = run("F64_F64_F64")?;
    let scale = reference.iter().fold(0f64, |m, x| m.max(x.abs()));
    let mut rows = vec![PrecisionRow { precision: "F64_F64_F64 (reference)".into(), max_rel_error: 0.0, secs: ref_secs }];
    for p in COMPARED_PRESETS {
        let (v, secs) = run(p)?;
        if v.len() != reference.len() {
            return Err(Error::value_error("precision compare: the call's result changed shape between presets"));
        }
        let err = v.iter().zip(&reference).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        let rel = if scale > 0.0 { err / scale } else { err };
        rows.push(PrecisionRow { precision: p.to_string(), max_rel_error: rel, secs });
    }
    Ok(rows)
}

/// `%precision compare CALL`: a table of each preset's error against an f64-accumulated
/// reference and its time (beyond JAX). See [`precision_compare_rows`].
pub fn precision_compare<T: CompareOutput>(call: impl Fn() -> T) -> Result<Text> {
    let rows = precision_compare_rows(call)?;
    let mut s = format!("{:<26} {:>14} {:>12}\n", "precision", "max rel error", "time");
    for r in &rows {
        s.push_str(&format!("{:<26} {:>14} {:>12}\n", r.precision, scientific(r.max_rel_error), format_time(r.secs)));
    }
    s.push_str("max rel error = max|y - y_ref| / max|y_ref|; time = fastest of 3 calls");
    if rows.iter().all(|r| r.max_rel_error == 0.0) {
        s.push_str(
            "\nevery preset gave the reference's values: the precision applies only to contractions \
             (dot_general, matmul, conv) at the default precision, and this call has none, or each has \
             an explicit precision=, or its values are exact in every preset",
        );
    }
    Ok(Text(s))
}

/// `x` in scientific notation with 3 significant digits and a signed two-digit exponent,
/// as Python's `f"{x:.2e}"` writes it (`1.23e-03`, `0.00e+00`; Rust's `{:.2e}` would give
/// `1.23e-3`, `0.00e0`).
pub fn scientific(x: f64) -> String {
    let s = format!("{x:.2e}");
    match s.split_once('e') {
        Some((m, e)) => match e.parse::<i32>() {
            Ok(e) => format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs()),
            Err(_) => s,
        },
        None => s, // inf, NaN
    }
}

/// `%sharding x`: `debug::visualize_array_sharding(x)` (text table; coloured blocks in a
/// terminal; HTML grid with per-device bytes in Jupyter). Errors: arrays of rank other
/// than 1 or 2 (JAX's `ValueError`); tracers.
pub fn sharding(x: &crate::trace::Array) -> Result<crate::display::sharding_view::ShardingView> {
    crate::sharding::visualize_array_sharding(x)
}

/// `%mesh` / `%mesh m`: the mesh's devices on a grid labelled by axis (`set_mesh`'s mesh
/// when none is given). Errors: `ValueError` when no mesh is given or set.
pub fn mesh(m: Option<&crate::sharding::Mesh>) -> Result<crate::display::sharding_view::ShardingView> {
    let m = match m {
        Some(m) => m.clone(),
        None => crate::sharding::get_mesh().ok_or_else(|| {
            crate::error::Error::value_error("no mesh is set: pass one (`%mesh mesh`) or call set_mesh(&mesh) first")
        })?,
    };
    Ok(crate::sharding::visualize_mesh(&m))
}

/// `%help`: the magics and the prelude's main names.
pub fn help() -> Text {
    Text(
        "jaxrepl magics (each on its own line: the first, or after Rust statements, which run first;\n\
         CALL is an expression such as f.call(&x); it ends with the line that closes its brackets,\n\
         and the lines after it run as Rust once the magic has shown its output):\n\
         \x20 %jaxpr CALL     the jaxpr of the jitted function CALL runs\n\
         \x20 %lower CALL     its lowered MLIR module (tensor level, upstream dialects)\n\
         \x20 %compile CALL   the optimized module after the compile pipeline (sharded call: the per-device program)\n\
         \x20 %compile --stage jaxpr|lowered|opt|llvm|asm CALL   one stage's text (asm: host assembly)\n\
         \x20 %diff-passes CALL  the IR diff of every compile pass that changed it\n\
         \x20 %cost CALL      cost analysis (flops, transcendentals, bytes) and memory analysis\n\
         \x20 %time CALL      wall time of one call, waiting for its result\n\
         \x20 %timeit CALL    mean ± std over repeated calls, like IPython\n\
         \x20 %profile CALL   timeline (SVG in Jupyter) and summary table of what CALL ran\n\
         \x20 %memory         memory_stats() and live buffers by allocation site\n\
         \x20 %explain        why recent calls traced or compiled: each cache layer's verdict, reason, cost\n\
         \x20 %eqn-count CALL equations per source line of CALL's trace (find unrolled loops)\n\
         \x20 %precision [V]  show/set jax_default_matmul_precision (highest, BF16_BF16_F32, none, ...)\n\
         \x20 %precision compare CALL   each dot algorithm preset's error vs f64 and time\n\
         \x20 %sharding X     how array X is laid out over devices (coloured table; HTML in Jupyter)\n\
         \x20 %mesh [M]       the mesh M (or set_mesh's) as a grid of devices with axis names\n\
         \x20 %help           this text\n\
         Engine: jnp::arange, jnp::linspace, jnp::zeros/ones/full, jit(|x: Array| ...), f.call(&x),\n\
         grad(f)(x), value_and_grad, jvp, vjp, vmap(f)(x), lax::cond/while_loop/fori_loop/scan, jax::random, jax::nn,\n\
         f.trace(&x)?.lower()?.compile()?, make_jaxpr(f, &x), debug::print!(\"{}\", x),\n\
         config::update(\"jax_explain_cache_misses\", true), x.block_until_ready()"
            .to_string(),
    )
}
