//! The ahead-of-time stages (JAX's `jax.stages`): `Traced` (the jaxpr) → `Lowered`
//! (the MLIR module) → `Compiled` (native code, with its analyses) → call.
//! Invariant: each stage is reached through the same caches as `Jitted::call`.

use super::jit::{run_donating, CacheEntry, Jitted, Signature};
use super::pipeline::{self, ExecutableRef, StageOptions};
use crate::compile::{cost_analysis, memory_analysis, CostAnalysis, MemoryAnalysis};
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
}

impl<A: Pytree, R: Pytree> Traced<A, R> {
    pub(crate) fn new(f: Jitted<A, R>, entry: Arc<CacheEntry>, sig: Signature) -> Self {
        Traced { f, entry, sig }
    }
    /// The closed jaxpr (prints in JAX's format).
    pub fn jaxpr(&self) -> &ClosedJaxpr {
        &self.entry.jaxpr
    }
    /// Output types (`Traced.out_info`).
    pub fn out_info(&self) -> Vec<ShapeDtypeStruct> {
        self.entry
            .jaxpr
            .jaxpr
            .out_avals()
            .into_iter()
            .map(|a| ShapeDtypeStruct { shape: a.shape, dtype: a.dtype, weak_type: a.weak_type })
            .collect()
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
                let opts = StageOptions { donated: self.entry.donated.clone(), ..Default::default() };
                Arc::new(pipeline::lower_closed(&self.entry.jaxpr, self.f.name(), &opts)?)
            }
        };
        Ok(Lowered { f: self.f.clone(), entry: self.entry.clone(), module })
    }
}

/// A lowered function: an MLIR module in upstream dialects at tensor level.
pub struct Lowered<A, R> {
    f: Jitted<A, R>,
    entry: Arc<CacheEntry>,
    module: Arc<LoweredModule>,
}

impl<A: Pytree, R: Pytree> Lowered<A, R> {
    /// The module text (`module @jit_f { func.func public @main(...) ... }`).
    pub fn as_text(&self) -> String {
        self.module.text.clone()
    }
    /// Compiles to native code (through the executable cache).
    /// Errors: pass pipeline or code generation failures.
    pub fn compile(&self) -> Result<Compiled<A, R>> {
        self.f.compile_entry(&self.entry)
    }
}

/// A compiled function for one signature (`Lowered.compile()`).
pub struct Compiled<A, R> {
    module: Arc<LoweredModule>,
    exe: ExecutableRef,
    jaxpr: ClosedJaxpr,
    out_statics: Vec<StaticValue>,
    out_tree: TreeDef,
    donated: Vec<bool>,
    static_argnums: Vec<usize>,
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
        Compiled { module, exe, jaxpr, out_statics, out_tree, donated, static_argnums, _p: std::marker::PhantomData }
    }
    /// The optimized module (after bufferization and loop lowering).
    pub fn as_text(&self) -> String {
        self.exe.optimized_ir().to_string()
    }
    /// LLVM IR of the compiled module.
    pub fn llvm_ir(&self) -> Result<String> {
        self.exe.llvm_ir()
    }
    /// Flops, transcendentals and bytes accessed (see `compile::CostAnalysis`).
    pub fn cost_analysis(&self) -> CostAnalysis {
        cost_analysis(&self.jaxpr.jaxpr)
    }
    /// Argument, output and temporary sizes in bytes.
    pub fn memory_analysis(&self) -> MemoryAnalysis {
        memory_analysis(&self.module)
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
        let outs: Vec<Array> = run_donating(&self.exe, &self.jaxpr, inputs, &self.donated, super::jit::sync_ok(&self.jaxpr.jaxpr))?;
        crate::trace::pytree::unflatten_like::<R>(&self.out_tree, outs, self.out_statics.clone())
    }
}
