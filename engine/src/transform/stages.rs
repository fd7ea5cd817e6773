//! The ahead-of-time stages (JAX's `jax.stages`): `Traced` (the jaxpr) → `Lowered`
//! (the MLIR module) → `Compiled` (native code, with its analyses) → call.
//! Invariant: each stage is reached through the same caches as `Jitted::call`.

use super::jit::{run_donating, CacheEntry, Jitted, Signature};
use super::pipeline::{self, ExecutableRef};
use crate::compile::{cost_analysis, memory_analysis, CostAnalysis, MemoryAnalysis, PassDiffs};
use crate::error::{Error, Result};
use crate::ir::{ClosedJaxpr, ShapeDtypeStruct, ShapedArray};
use crate::lower::LoweredModule;
use crate::trace::pytree::{ArgLeaf, Args, Flat, Pytree, StaticValue, TreeDef};
use crate::trace::Array;
use std::sync::Arc;

/// A traced function at one signature (`jit(f).trace(args)`).
pub struct Traced<A, R> {
    f: Jitted<A, R>,
    entry: Arc<CacheEntry>,
    sig: Signature,
    /// The arguments' and results' shardings when traced on sharded arrays.
    pub(crate) shardings: Option<crate::sharding_rules::Annotations>,
    /// The jaxpr with its arguments' types, when traced on arguments sharded over an
    /// explicit mesh or in pinned host memory (prints `f32[8@x]`, `f32<host>[8]`).
    pub(crate) typed: Option<ClosedJaxpr>,
}

impl<A: Pytree, R: Pytree> Traced<A, R> {
    pub(crate) fn new(f: Jitted<A, R>, entry: Arc<CacheEntry>, sig: Signature) -> Self {
        Traced { f, entry, sig, shardings: None, typed: None }
    }
    /// The closed jaxpr (prints in JAX's format; on arguments sharded over an explicit
    /// mesh or in pinned host memory its types show it: `f32[8@x]`, `f32<host>[8]`).
    pub fn jaxpr(&self) -> &ClosedJaxpr {
        self.typed.as_ref().unwrap_or(&self.entry.jaxpr)
    }
    /// Output types in the output's structure (`Traced.out_info`): one
    /// `ShapeDtypeStruct` per leaf; a single output prints as the bare spec
    /// (`ShapeDtypeStruct(shape=(), dtype=int32, weak_type=True)`), a tuple as a tuple.
    pub fn out_info(&self) -> crate::tree::ShapeTree {
        let leaves = self
            .entry
            .jaxpr
            .jaxpr
            .out_avals()
            .into_iter()
            .map(|a| ShapeDtypeStruct { shape: a.shape, dtype: a.dtype, weak_type: a.weak_type })
            .collect();
        crate::tree::ShapeTree::new(self.entry.out_tree.clone(), leaves)
    }
    /// Structure of the output (`Traced.out_tree`).
    pub fn out_tree(&self) -> &TreeDef {
        &self.entry.out_tree
    }
    /// Argument types of this trace.
    pub fn in_avals(&self) -> &[ShapedArray] {
        &self.sig.avals
    }
    /// Lowers to an MLIR module. Errors: lowering failures.
    pub fn lower(&self) -> Result<Lowered<A, R>> {
        let module = match self.entry.compiled.get() {
            Some(c) => c.lowered.clone(),
            None => {
                let opts = self.entry.stage_options(None);
                let _precision = crate::lax::precision::with_default_matmul_precision(self.entry.matmul_precision)?;
                Arc::new(pipeline::lower_closed(&self.entry.jaxpr, self.f.name(), &opts)?)
            }
        };
        Ok(Lowered { f: self.f.clone(), entry: self.entry.clone(), module, shardings: self.shardings.clone() })
    }
}

/// A stage of the compile pipeline whose text `Compiled::as_text_stage` shows
/// (beyond JAX, which shows only HLO before and after XLA's passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The closed jaxpr (`Traced.jaxpr`).
    Jaxpr,
    /// The lowered MLIR module at tensor level (`Lowered.as_text()`).
    Lowered,
    /// The module after bufferization and conversion to loops (`Compiled.as_text()`).
    Optimized,
    /// LLVM IR, as translated from the LLVM dialect (before LLVM's optimisation passes).
    Llvm,
    /// Native assembly for the host CPU after LLVM's `default<On>` pipeline.
    Asm,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 5] = [Stage::Jaxpr, Stage::Lowered, Stage::Optimized, Stage::Llvm, Stage::Asm];
    /// The stage's name as `%compile --stage` takes it: `jaxpr`, `lowered`, `opt`, `llvm`, `asm`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Jaxpr => "jaxpr",
            Stage::Lowered => "lowered",
            Stage::Optimized => "opt",
            Stage::Llvm => "llvm",
            Stage::Asm => "asm",
        }
    }
}

impl std::str::FromStr for Stage {
    type Err = Error;
    /// Parses a stage name (`optimized` and `mlir` are accepted for `opt` and `lowered`).
    /// Errors: `ValueError: Unknown stage 'x'; the stages are: jaxpr, lowered, opt, llvm, asm`.
    fn from_str(s: &str) -> Result<Stage> {
        match s {
            "jaxpr" => Ok(Stage::Jaxpr),
            "lowered" | "mlir" => Ok(Stage::Lowered),
            "opt" | "optimized" => Ok(Stage::Optimized),
            "llvm" => Ok(Stage::Llvm),
            "asm" => Ok(Stage::Asm),
            _ => Err(Error::value_error(format!(
                "Unknown stage '{s}'; the stages are: {}",
                Stage::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

/// Parses `compile` options (JAX's `compiler_options`) into LLVM's optimisation level,
/// starting from the process-wide `JAXREPL_FLAGS` (else 2). Known keys:
/// - `opt_level`: an integer 0–3;
/// - `optimization_level`: JAX's `CompilerEffortLevel`, `O0`..`O3` (also
///   `CompilerEffortLevel.O3`, or its values 9/19/29/39), mapped to -O0..-O3; `UNKNOWN`
///   (or 0) keeps the default.
///
/// - `memory_fitting_level`: a `CompilerEffortLevel` as above, validated, without effect;
/// - XLA's flag names (`xla_...`): accepted with a `UserWarning` that they have no effect (JAX
///   hands them to XLA, which accepts even another platform's flags).
///
/// Errors: `ValueError` `No such compile option: 'name'` (XLA's text, then a line listing the
/// options taken) for any other key, `ValueError` naming the accepted values for a bad value;
/// a bad `JAXREPL_FLAGS`.
pub fn parse_compiler_options(options: &[(&str, &str)]) -> Result<u8> {
    let mut opt_level = pipeline::default_opt_level()?;
    for (k, v) in options {
        apply_compiler_option(&mut opt_level, k, v)?;
    }
    Ok(opt_level)
}

/// Applies one option `k = v` to `opt_level` (see `parse_compiler_options`).
pub(crate) fn apply_compiler_option(opt_level: &mut u8, k: &str, v: &str) -> Result<()> {
    match k {
        "opt_level" => {
            *opt_level = match v.trim().parse::<u8>() {
                Ok(n) if n <= 3 => n,
                _ => return Err(Error::value_error(format!("opt_level must be an integer from 0 to 3, got '{v}'"))),
            }
        }
        "optimization_level" => {
            let name = v.trim().trim_start_matches("CompilerEffortLevel.");
            match name {
                "O0" | "9" => *opt_level = 0,
                "O1" | "19" => *opt_level = 1,
                "O2" | "29" => *opt_level = 2,
                "O3" | "39" => *opt_level = 3,
                "UNKNOWN" | "0" => {}
                _ => {
                    return Err(Error::value_error(format!(
                        "optimization_level must be a CompilerEffortLevel (UNKNOWN, O0, O1, O2, O3), got '{v}'"
                    )))
                }
            }
        }
        "memory_fitting_level" => {
            // JAX's second CompilerEffortLevel: validated, no effect here (nothing is fitted
            // to a device's memory by recompiling).
            let name = v.trim().trim_start_matches("CompilerEffortLevel.");
            if !["UNKNOWN", "O0", "O1", "O2", "O3", "0", "9", "19", "29", "39"].contains(&name) {
                return Err(Error::value_error(format!(
                    "memory_fitting_level must be a CompilerEffortLevel (UNKNOWN, O0, O1, O2, O3), got '{v}'"
                )));
            }
        }
        // XLA's own flags (`xla_cpu_enable_fast_math`, `xla_gpu_enable_latency_hiding_scheduler`,
        // ...): JAX passes them to XLA, which accepts even another platform's flags. This
        // backend is MLIR/LLVM, not XLA: accepted, with a warning that they do nothing here.
        _ if k.starts_with("xla_") && !k.contains(char::is_whitespace) => {
            crate::transform::jit::warn(format!(
                "compile option '{k}' is an XLA flag; jaxrepl compiles through MLIR/LLVM, not XLA, so it has no effect here"
            ));
        }
        _ => {
            return Err(Error::value_error(format!(
                "No such compile option: '{k}'\nThe options jaxrepl takes: opt_level (0-3), optimization_level and \
                 memory_fitting_level (a CompilerEffortLevel), and XLA's flag names (xla_..., accepted without effect)"
            )))
        }
    }
    Ok(())
}

/// A lowered function: an MLIR module in upstream dialects at tensor level.
pub struct Lowered<A, R> {
    f: Jitted<A, R>,
    entry: Arc<CacheEntry>,
    module: Arc<LoweredModule>,
    shardings: Option<crate::sharding_rules::Annotations>,
}

impl<A: Pytree, R: Pytree> Lowered<A, R> {
    /// The module text (`module @jit_f { func.func public @main(...) ... }`). Traced on
    /// sharded arrays, it shows JAX's Shardy annotations (`mhlo.num_partitions`, `sdy.mesh`,
    /// a `sdy.sharding` per argument and result); the module that compiles has none.
    pub fn as_text(&self) -> String {
        match &self.shardings {
            Some(a) => crate::sharding_rules::annotate_text(&self.module.text, a),
            None => self.module.text.clone(),
        }
    }
    /// Compiles to native code (through the executable cache).
    /// A program with a `shard_map` compiles to its per-device program (the partitioner's
    /// segments, compiled on first call or `as_text`): see `Compiled` (`jax.jit(shard_map(f))
    /// .lower(x).compile()` in JAX). Errors: pass pipeline or code generation failures.
    pub fn compile(&self) -> Result<Compiled<A, R>> {
        if self.entry.has_shard_map {
            return self.compile_partitioned(self.f.resolved_opt_level()?);
        }
        let mut c = self.f.compile_entry(&self.entry)?;
        // Only `out_shardings` on the mesh: the call runs on one device (no partitioned text).
        c.shardings = self.shardings.clone().filter(|a| !a.bare_ins());
        Ok(c)
    }
    fn compile_partitioned(&self, opt_level: u8) -> Result<Compiled<A, R>> {
        let mut c = Compiled {
            module: self.module.clone(),
            exe: None,
            jaxpr: self.entry.jaxpr.clone(),
            out_statics: self.entry.out_statics.clone(),
            out_tree: self.entry.out_tree.clone(),
            donated: self.entry.donated.clone(),
            static_argnums: self.f.static_argnums_list().to_vec(),
            opt_level,
            shardings: self.shardings.clone(),
            _p: std::marker::PhantomData,
        };
        if c.shardings.is_none() {
            c.shardings = crate::sharding_rules::annotations(&self.entry.jaxpr, &vec![None; self.entry.jaxpr.jaxpr.invars.len()]);
        }
        Ok(c)
    }
    /// Compiles with options (JAX's `lowered.compile(compiler_options={...})`), e.g.
    /// `compile_with(&[("opt_level", "3")])`. Each level is a separate entry of the
    /// executable cache. Errors: see `parse_compiler_options`; compile failures.
    pub fn compile_with(&self, options: &[(&str, &str)]) -> Result<Compiled<A, R>> {
        let opt_level = parse_compiler_options(options)?;
        if self.entry.has_shard_map {
            return self.compile_partitioned(opt_level);
        }
        let opts = self.entry.stage_options(Some(opt_level));
        let (exe, _) = pipeline::compile_lowered(&self.module, &opts)?;
        Ok(Compiled::new(
            self.module.clone(),
            exe,
            self.entry.jaxpr.clone(),
            self.entry.out_statics.clone(),
            self.entry.out_tree.clone(),
            self.entry.donated.clone(),
            self.f.static_argnums_list().to_vec(),
        )
        .with_opt_level(opt_level))
    }
    /// Flops, transcendentals and bytes accessed (JAX's `Lowered.cost_analysis()`; see
    /// `compile::CostAnalysis`). A program with a `shard_map` (or traced on sharded
    /// arguments) that the partitioner takes reports **one device's** cost, as XLA's
    /// analysis of an SPMD program does: the per-device program on blocks, collectives'
    /// combines counted (`partition::per_device_cost`); the mesh's total is that times
    /// `jax::device_count()` of the mesh. Otherwise the whole program's cost.
    pub fn cost_analysis(&self) -> CostAnalysis {
        if let Some(a) = &self.shardings {
            let opts = self.entry.stage_options(None);
            if let Some(c) = crate::partition::plan_cost(&self.entry.jaxpr, a.mesh(), a.ins(), &opts) {
                return c;
            }
        }
        cost_analysis(&self.entry.jaxpr.jaxpr)
    }
    /// Runs the compile pipelines pass by pass and diffs the module around each pass
    /// (`%diff-passes`). Errors: a pass fails.
    pub fn diff_passes(&self) -> Result<PassDiffs> {
        crate::compile::diff_passes(&self.module)
    }
}

/// A compiled function for one signature (`Lowered.compile()`). A program with a
/// `shard_map` has no whole-program executable (`exe` is `None`): it is the partitioner's
/// per-device program (segments cut at the collectives, `partition.rs`); its calls run
/// partitioned (equation by equation when the partitioner cannot take it), its text is the
/// per-device program, its cost one device's, and the LLVM/assembly stages are errors.
pub struct Compiled<A, R> {
    module: Arc<LoweredModule>,
    exe: Option<ExecutableRef>,
    jaxpr: ClosedJaxpr,
    out_statics: Vec<StaticValue>,
    out_tree: TreeDef,
    donated: Vec<bool>,
    static_argnums: Vec<usize>,
    opt_level: u8,
    pub(crate) shardings: Option<crate::sharding_rules::Annotations>,
    _p: std::marker::PhantomData<fn(A) -> R>,
}

impl<A: Pytree, R: Pytree> Compiled<A, R> {
    pub(crate) fn new(
        module: Arc<LoweredModule>,
        exe: ExecutableRef,
        jaxpr: ClosedJaxpr,
        out_statics: Vec<StaticValue>,
        out_tree: TreeDef,
        donated: Vec<bool>,
        static_argnums: Vec<usize>,
    ) -> Self {
        Compiled { module, exe: Some(exe), jaxpr, out_statics, out_tree, donated, static_argnums, opt_level: 2, shardings: None, _p: std::marker::PhantomData }
    }
    /// Records the LLVM optimisation level the executable was compiled at (default 2).
    pub(crate) fn with_opt_level(mut self, opt_level: u8) -> Self {
        self.opt_level = opt_level;
        self
    }
    /// The LLVM optimisation level this executable was compiled at (0–3).
    pub fn opt_level(&self) -> u8 {
        self.opt_level
    }
    /// Which tier of tiered compilation (`jaxrepl_tiered_compilation`,
    /// `compile::compile_tiered`) runs now: 1 = the quick first tier (LLVM
    /// `compile::TIER1_OPT_LEVEL`), 2 = code optimised at `opt_level()`. The text stages,
    /// cost and memory analysis always describe the optimised tier (both tiers share the
    /// MLIR pipeline; assembly and code size are emitted at `opt_level()`).
    pub fn tier(&self) -> u8 {
        self.exe.as_ref().map_or(2, |e| e.tier())
    }
    /// Executions so far of the first tier's and the optimised tier's code.
    pub fn tier_runs(&self) -> (u64, u64) {
        self.exe.as_ref().map_or((0, 0), |e| e.tier_runs())
    }
    /// Asks for the optimised tier now (normally the second call does) and waits up to
    /// `timeout` for it; whether it runs now. Never needed for correctness: both tiers
    /// compute the same function.
    pub fn wait_optimized(&self, timeout: std::time::Duration) -> bool {
        self.exe.as_ref().is_none_or(|e| e.wait_upgraded(timeout))
    }
    /// Why the optimised tier failed to compile, if it did (the first tier keeps running).
    pub fn optimized_tier_error(&self) -> Option<String> {
        self.exe.as_ref().and_then(|e| e.upgrade_error())
    }
    /// The text of one stage of this compile (see `Stage`); `Stage::Asm` is the host's
    /// assembly at this executable's optimisation level.
    /// Errors (`Compile`): translation to LLVM IR or code generation failed.
    pub fn as_text_stage(&self, stage: Stage) -> Result<String> {
        match stage {
            Stage::Jaxpr => Ok(self.jaxpr.to_string()),
            Stage::Lowered => Ok(self.module.text.clone()),
            Stage::Optimized => Ok(self.as_text()),
            Stage::Llvm => self.llvm_ir(),
            Stage::Asm => self.whole()?.assembly(self.opt_level),
        }
    }
    /// The whole-program executable. Errors: a `shard_map` program has none.
    fn whole(&self) -> Result<&ExecutableRef> {
        self.exe.as_ref().ok_or_else(|| {
            Error::value_error("a shard_map program compiles per-device segments (no whole-program executable); stages jaxpr, lowered and opt show them")
        })
    }
    /// Native assembly of the compiled code (`as_text_stage(Stage::Asm)`).
    pub fn asm(&self) -> Result<String> {
        self.as_text_stage(Stage::Asm)
    }
    /// The optimized module (after bufferization and loop lowering).
    /// On sharded arguments, a first comment line says which execution path the call
    /// takes; a partitioned program shows its per-device program with the collectives (`sharding_rules::compiled_text`).
    pub fn as_text(&self) -> String {
        match (&self.shardings, &self.exe) {
            (Some(a), Some(exe)) => crate::sharding_rules::compiled_text(&self.jaxpr, a, exe.optimized_ir(), &self.partition_opts()),
            (None, Some(exe)) => exe.optimized_ir().to_string(),
            (a, None) => a
                .as_ref()
                .and_then(|a| crate::partition::describe(&self.jaxpr, a.mesh(), a.ins(), &self.partition_opts()))
                .unwrap_or_else(|| "// jaxrepl: this shard_map program runs equation by equation (the partitioner cannot take it); no compiled module".to_string()),
        }
    }
    /// The options the partitioner compiles per-device programs with (this compile's
    /// optimisation level).
    fn partition_opts(&self) -> super::pipeline::StageOptions {
        super::pipeline::StageOptions { donated: vec![], opt_level: Some(self.opt_level), ..Default::default() }
    }
    /// LLVM IR of the compiled module.
    pub fn llvm_ir(&self) -> Result<String> {
        self.whole()?.llvm_ir()
    }
    /// Flops, transcendentals and bytes accessed (see `compile::CostAnalysis`); for a
    /// `shard_map` program one device's cost, as `Lowered::cost_analysis`.
    pub fn cost_analysis(&self) -> CostAnalysis {
        if let (None, Some(a)) = (&self.exe, &self.shardings) {
            if let Some(c) = crate::partition::plan_cost(&self.jaxpr, a.mesh(), a.ins(), &self.partition_opts()) {
                return c;
            }
        }
        cost_analysis(&self.jaxpr.jaxpr)
    }
    /// Argument, output, temporary and generated-code sizes in bytes (JAX's
    /// `CompiledMemoryStats`): arguments and outputs from the signature, temporaries as
    /// the statically sized buffers the optimized module allocates (`compile::temp_bytes`),
    /// generated code as the `.text` bytes LLVM emits for the host at this executable's
    /// optimisation level (0 if code generation for the measurement fails).
    pub fn memory_analysis(&self) -> MemoryAnalysis {
        let mut m = memory_analysis(&self.module);
        if let Some(exe) = &self.exe {
            m.temp_size_in_bytes = crate::compile::temp_bytes(exe.optimized_ir());
            m.generated_code_size_in_bytes = exe.code_size(self.opt_level).unwrap_or(0);
        }
        m
    }
    /// The argument types this executable was compiled for.
    pub fn in_avals(&self) -> Vec<ShapedArray> {
        self.jaxpr.jaxpr.in_avals()
    }
    /// Calls the compiled function. Errors: `TypeError` listing every argument whose type
    /// differs from the compiled signature. Arguments at `static_argnums` positions are
    /// passed too (the executable was compiled for their traced values and ignores them).
    pub fn call(&self, args: impl Args<A>) -> Result<R> {
        let mut flat = Flat::default();
        args.flatten_args(&mut flat);
        super::jit::apply_static_argnums(&self.static_argnums, &mut flat)?;
        let want = self.in_avals();
        let mut mismatches = Vec::new();
        for (i, l) in flat.leaves.iter().enumerate() {
            let got = l.aval();
            match want.get(i) {
                Some(w) if w.shape == got.shape && w.dtype == got.dtype => {}
                Some(w) => mismatches.push(format!(
                    "Argument 'args[{i}]' compiled with {} and called with {}",
                    w.strong().long(),
                    got.strong().long()
                )),
                None => mismatches.push(format!("Argument 'args[{i}]' was not part of the compiled signature")),
            }
            if let ArgLeaf::Value(a) = l {
                if a.is_tracer() {
                    return Err(Error::type_error(
                        "Cannot apply JAX transformations to a function lowered and compiled for a particular signature. Detected argument of Tracer type.",
                    ));
                }
            }
        }
        if flat.leaves.len() < want.len() {
            mismatches.push(format!("expected {} arguments, got {}", want.len(), flat.leaves.len()));
        }
        if !mismatches.is_empty() {
            return Err(Error::type_error(format!(
                "Argument types differ from the types for which this computation was compiled. The mismatches are:\n{}",
                mismatches.join("\n")
            )));
        }
        let inputs = flat
            .leaves
            .iter()
            .map(|l| match l {
                ArgLeaf::Value(a) => a.device().cloned().ok_or_else(|| Error::type_error("traced argument")),
                ArgLeaf::Spec(_) => Err(Error::type_error("cannot call a Compiled with ShapeDtypeStruct specs")),
            })
            .collect::<Result<Vec<_>>>()?;
        let Some(exe) = &self.exe else { return self.call_partitioned(inputs) };
        let place = crate::sharding::out_place(inputs.iter(), "compiled", |i| format!("args[{i}]"))?
            .for_jaxpr(&self.jaxpr, &inputs)?
            .with_kinds(&self.module.out_memory_kinds);
        if let Some(mesh) = place.mesh().filter(|_| !self.donated.iter().any(|d| *d)) {
            if let Some(outs) = crate::partition::try_run("compiled", &self.jaxpr, &inputs, mesh, &[], &self.partition_opts(), &self.module.out_memory_kinds)? {
                return crate::trace::pytree::unflatten_like::<R>(&self.out_tree, outs, self.out_statics.clone());
            }
        }
        let j = &self.jaxpr.jaxpr;
        let here = super::jit::run_here(super::jit::sync_ok(j), super::jit::bounded_ok(j), exe);
        let outs: Vec<Array> = run_donating(exe, &self.jaxpr, inputs, &self.donated, here, &place)?;
        crate::trace::pytree::unflatten_like::<R>(&self.out_tree, outs, self.out_statics.clone())
    }
    /// A call of a `shard_map` program: partitioned on the mesh of its `shard_map`
    /// (arguments unsharded or sharded on it, no donation), else equation by equation.
    fn call_partitioned(&self, inputs: Vec<Arc<crate::runtime::DeviceArray>>) -> Result<R> {
        let mesh = crate::sharding_rules::first_shard_map_mesh(&self.jaxpr.jaxpr);
        if let Some(mesh) = mesh.filter(|m| !self.donated.iter().any(|d| *d) && inputs.iter().all(|d| d.sharded_info().is_none_or(|s| &s.sharding.mesh == m))) {
            if let Some(outs) = crate::partition::try_run("compiled", &self.jaxpr, &inputs, &mesh, &[], &self.partition_opts(), &self.module.out_memory_kinds)? {
                return crate::trace::pytree::unflatten_like::<R>(&self.out_tree, outs, self.out_statics.clone());
            }
        }
        let consts: Vec<Array> = self.jaxpr.consts.iter().map(|b| Array::from_buffer((**b).clone(), false)).collect();
        let args: Vec<Array> = inputs.into_iter().map(Array::from_device).collect();
        let outs = super::interp::eval_jaxpr(&self.jaxpr.jaxpr, &consts, &args)?;
        crate::trace::pytree::unflatten_like::<R>(&self.out_tree, outs, self.out_statics.clone())
    }
}
