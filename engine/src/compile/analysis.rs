//! Static analyses shown by `Compiled.cost_analysis()` and `.memory_analysis()`, with
//! XLA's HloCostAnalysis conventions.
//!
//! Invariant: figures depend only on the jaxpr (cost) or the lowered module's signature
//! (memory), never on compilation, so they are deterministic and free to compute.
//! Conventions: one flop per element of every elementwise op (comparisons, selects and
//! casts included); exp/log/sin/cos/tanh/sqrt/pow count as transcendentals instead;
//! a reduction costs (input size − output size) flops; `dot_general` costs
//! 2 × output size × contracted size; data movement (broadcast, reshape, transpose, iota)
//! is free; `pjit` adds its inner jaxpr's cost. Bytes accessed are the entry's input plus
//! output bytes (constants are embedded, as in JAX, so they are not counted).

use crate::ir::{Jaxpr, Primitive};
use crate::lower::LoweredModule;
use std::fmt;

/// Cost estimate of a computation (XLA's `cost_analysis()` keys).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CostAnalysis {
    /// Floating-point (and integer) operations, each elementwise op per element counting 1.
    pub flops: f64,
    /// Transcendental function evaluations (exp, log, sin, cos, tanh, sqrt, pow).
    pub transcendentals: f64,
    /// Bytes read from the arguments plus bytes written to the results.
    pub bytes_accessed: f64,
}

impl fmt::Display for CostAnalysis {
    /// The dict form JAX prints: `{'flops': 2.0, 'transcendentals': 0.0, 'bytes accessed': 12.0}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{'flops': {}, 'transcendentals': {}, 'bytes accessed': {}}}",
            py_float(self.flops),
            py_float(self.transcendentals),
            py_float(self.bytes_accessed)
        )
    }
}

fn py_float(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v}") }
}

/// Estimates flops, transcendentals and bytes accessed of `jaxpr` (see the module doc).
pub fn cost_analysis(jaxpr: &Jaxpr) -> CostAnalysis {
    let mut c = body_cost(jaxpr);
    let ins: usize = jaxpr.invars.iter().map(|v| v.aval.nbytes()).sum();
    let outs: usize = jaxpr.outvars.iter().map(|a| a.aval().nbytes()).sum();
    c.bytes_accessed = (ins + outs) as f64;
    c
}

fn body_cost(j: &Jaxpr) -> CostAnalysis {
    use Primitive::*;
    let mut c = CostAnalysis::default();
    for e in &j.eqns {
        let out = e.outputs.first().map(|v| v.aval.size()).unwrap_or(0) as f64;
        match &e.primitive {
            Exp | Log | Sin | Cos | Tan | Tanh | Sqrt | Pow => c.transcendentals += out,
            p if p.is_unary_elementwise() || p.is_binary_elementwise() => c.flops += out,
            SelectN | ConvertElementType { .. } => c.flops += out,
            ReduceSum { .. } | ReduceMax { .. } | ReduceMin { .. } => {
                let input = e.inputs.first().map(|a| a.aval().size()).unwrap_or(0) as f64;
                c.flops += (input - out).max(0.0);
            }
            DotGeneral { lhs_contracting, .. } => {
                let lhs = e.inputs.first().map(|a| a.aval().shape.clone()).unwrap_or_default();
                let k: usize = lhs_contracting.iter().map(|&i| lhs.get(i).copied().unwrap_or(1)).product();
                c.flops += 2.0 * out * k as f64;
            }
            Pjit { jaxpr, .. } => {
                let inner = body_cost(&jaxpr.jaxpr);
                c.flops += inner.flops;
                c.transcendentals += inner.transcendentals;
            }
            // Loops count their body once per known trip (while: once, as XLA does);
            // a cond counts its most expensive branch.
            Scan { jaxpr, length, .. } => {
                let inner = body_cost(jaxpr);
                c.flops += inner.flops * *length as f64;
                c.transcendentals += inner.transcendentals * *length as f64;
            }
            p if !p.sub_jaxprs().is_empty() => {
                let costs: Vec<_> = p.sub_jaxprs().into_iter().map(body_cost).collect();
                let pick = |f: fn(&CostAnalysis) -> f64| costs.iter().map(f).fold(0.0, f64::max);
                c.flops += pick(|x| x.flops);
                c.transcendentals += pick(|x| x.transcendentals);
            }
            _ => {}
        }
    }
    c
}

/// Memory use of a compiled computation, in bytes (JAX's `CompiledMemoryStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryAnalysis {
    /// Native code size (`.text` bytes); filled in by `Compiled::memory_analysis` (0 here).
    pub generated_code_size_in_bytes: u64,
    /// Bytes of all entry arguments (large-constant parameters included).
    pub argument_size_in_bytes: u64,
    /// Bytes of all results.
    pub output_size_in_bytes: u64,
    /// Bytes shared between arguments and results; 0 until execution honours donation.
    pub alias_size_in_bytes: u64,
    /// Scratch bytes beyond arguments and results; filled in by `Compiled::memory_analysis`
    /// from the optimized module's allocations (0 here).
    pub temp_size_in_bytes: u64,
    /// Bytes of the arguments in a host memory kind (`in_shardings` with
    /// `with_memory_kind("pinned_host")`), not counted in `argument_size_in_bytes` (as XLA
    /// counts them on an accelerator; JAX on CPU reports 0).
    pub host_argument_size_in_bytes: u64,
    /// Bytes of the results placed in a host memory kind (`out_shardings` with a memory
    /// kind, `device_put` to one), not counted in `output_size_in_bytes`.
    pub host_output_size_in_bytes: u64,
}

/// Memory figures of a lowered module's entry signature.
pub fn memory_analysis(module: &LoweredModule) -> MemoryAnalysis {
    let host = |kinds: &[crate::runtime::MemoryKind], i: usize| kinds.get(i).is_some_and(|k| k.is_host());
    let split = |avals: &[crate::ir::ShapedArray], kinds: &[crate::runtime::MemoryKind]| {
        avals.iter().enumerate().fold((0u64, 0u64), |(d, h), (i, a)| {
            if host(kinds, i) {
                (d, h + a.nbytes() as u64)
            } else {
                (d + a.nbytes() as u64, h)
            }
        })
    };
    let consts: usize = module.const_args.iter().map(|b| b.bytes().len()).sum();
    let (args, host_args) = split(&module.in_avals, &module.in_memory_kinds);
    let (outs, host_outs) = split(&module.out_avals, &module.out_memory_kinds);
    MemoryAnalysis {
        argument_size_in_bytes: consts as u64 + args,
        output_size_in_bytes: outs,
        host_argument_size_in_bytes: host_args,
        host_output_size_in_bytes: host_outs,
        ..Default::default()
    }
}

impl fmt::Display for MemoryAnalysis {
    /// JAX's repr: `CompiledMemoryStats(generated_code_size_in_bytes=0, argument_size_in_bytes=8, ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CompiledMemoryStats(generated_code_size_in_bytes={}, argument_size_in_bytes={}, \
output_size_in_bytes={}, alias_size_in_bytes={}, temp_size_in_bytes={}, \
host_generated_code_size_in_bytes=0, host_argument_size_in_bytes={}, host_output_size_in_bytes={}, \
host_alias_size_in_bytes=0, host_temp_size_in_bytes=0)",
            self.generated_code_size_in_bytes,
            self.argument_size_in_bytes,
            self.output_size_in_bytes,
            self.alias_size_in_bytes,
            self.temp_size_in_bytes,
            self.host_argument_size_in_bytes,
            self.host_output_size_in_bytes
        )
    }
}
