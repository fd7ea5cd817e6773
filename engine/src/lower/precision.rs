//! `dot_general` with a `precision` param: the CPU emulation of JAX's dot algorithm presets.
//!
//! Levels (`Precision.DEFAULT/HIGH/HIGHEST`) compute in the operands' own precision, as
//! XLA:CPU does; the lowered text records them (`// dot_general precision = [HIGHEST,
//! HIGHEST]`). Presets are emulated so that a laptop shows the error a TPU or GPU gives:
//!
//! - `BF16_BF16_F32`, `TF32_TF32_F32`, `F16_F16_F32`: each operand is rounded (to nearest,
//!   ties to even) to the named input format, then multiplied and accumulated in f32. A
//!   product of two bf16/tf32/f16 values is exact in f32, so this is the MXU/tensor-core
//!   result up to the order of the f32 accumulation.
//! - `BF16_BF16_BF16`, `F16_F16_F16`: as above, with the result rounded to bf16/f16.
//! - Split schemes (`BF16_BF16_F32_X3/_X6/_X9`, `TF32_TF32_F32_X3`): each operand is split
//!   into parts `x = x0 + x1 (+ x2)`, `x0 = round(x)`, `x1 = round(x - x0)`, `x2 =
//!   round(x - x0 - x1)` (the residuals are exact in f32), and the products `xi·yj` are
//!   summed smallest first: X3 keeps `i + j ≤ 1` (3 products), X6 `i + j ≤ 2` (6), X9 all
//!   nine. Source: G. Henry, P. T. P. Tang, A. Heinecke, "Leveraging the bfloat16
//!   Artificial Intelligence Datatype For Higher-Precision Computations", ARITH 2019
//!   (bf16x3/x6/x9), and NVIDIA CUTLASS's 3xTF32 (`tf32x3`); XLA's GPU rewrite of these
//!   algorithms (`xla/service/gpu/transforms/dot_algorithm_rewriter.cc`) uses the same
//!   products and order.
//! - `F32_F32_F32`: f32-rounded operands, f32 accumulation; `F64_F64_F64`: operands
//!   widened to f64 (exactly), f64 accumulation, the result rounded to the output dtype.
//! - `ANY_F8_*` cannot be honoured (the name fixes no 8-bit format): a `ValueError` as
//!   JAX's on CPU.
//!
//! Every partial product goes through [`Lowerer::dot`], so large ones use the GEMM runtime.

use super::scalar::compute_dtype;
use super::{Lowerer, Val};
use crate::error::Error;
use crate::ir::{DType, DotAlgorithmPreset, DotPrecision, ShapedArray};

/// The format operands (or results) are rounded to.
#[derive(Clone, Copy, PartialEq)]
enum Round {
    Bf16,
    F16,
    Tf32,
    F32,
    None,
}

impl Lowerer {
    /// `dot_general` honouring `precision` (or, when `None`, the default
    /// `jax_default_matmul_precision` in effect while lowering).
    pub(super) fn dot_precision(
        &mut self,
        lhs: &Val,
        rhs: &Val,
        out: &ShapedArray,
        dims: [&Vec<usize>; 4],
        precision: Option<DotPrecision>,
    ) -> Result<Val, Error> {
        let Some(p) = precision.or_else(crate::lax::precision::default_matmul_precision) else {
            return self.dot(lhs, rhs, out, dims);
        };
        let preset = match p {
            DotPrecision::Levels(..) => {
                self.e.line(&format!("// dot_general {}", p.lowered_text()));
                return self.dot(lhs, rhs, out, dims);
            }
            DotPrecision::Algorithm(a) => a,
        };
        use DotAlgorithmPreset::*;
        if !preset.supported_on_cpu() {
            return Err(Error::value_error(format!(
                "The precision '{}' is not supported by dot_general on CPU (the 8-bit float format is not fixed by \
                 the preset); the CPU backend emulates {}",
                preset.name(),
                DotAlgorithmPreset::ALL.iter().filter(|p| p.supported_on_cpu()).map(|p| p.name()).collect::<Vec<_>>().join(", ")
            )));
        }
        let (ld, rd) = (lhs.aval().dtype, rhs.aval().dtype);
        if preset == Default || !ld.is_float() || !rd.is_float() {
            self.e.line(&format!("// dot_general {}", p.lowered_text()));
            return self.dot(lhs, rhs, out, dims);
        }
        let (round, parts, products, out_round) = match preset {
            Bf16Bf16F32 => (Round::Bf16, 1, 1, Round::None),
            Bf16Bf16Bf16 => (Round::Bf16, 1, 1, Round::Bf16),
            Bf16Bf16F32X3 => (Round::Bf16, 2, 3, Round::None),
            Bf16Bf16F32X6 => (Round::Bf16, 3, 6, Round::None),
            Bf16Bf16F32X9 => (Round::Bf16, 3, 9, Round::None),
            Tf32Tf32F32 => (Round::Tf32, 1, 1, Round::None),
            Tf32Tf32F32X3 => (Round::Tf32, 2, 3, Round::None),
            F16F16F32 => (Round::F16, 1, 1, Round::None),
            F16F16F16 => (Round::F16, 1, 1, Round::F16),
            F32F32F32 => (Round::F32, 1, 1, Round::None),
            F64F64F64 => (Round::None, 1, 1, Round::None),
            _ => unreachable!("unsupported presets were rejected above"),
        };
        self.e.line(&format!(
            "// dot_general {} (emulated: {} part(s) per operand, {} product(s))",
            p.lowered_text(),
            parts,
            products
        ));
        // Working dtype of the parts, partial products and their sum.
        let w = if preset == F64F64F64 || compute_dtype(ld) == DType::F64 || compute_dtype(out.dtype) == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let lw = self.cast_tensor(lhs, w)?;
        let rw = self.cast_tensor(rhs, w)?;
        let lp = self.split(&lw, parts, round)?;
        let rp = self.split(&rw, parts, round)?;
        // Products (i, j) with i + j below the scheme's limit, smallest terms first.
        let mut pairs: Vec<(usize, usize)> = (0..parts).flat_map(|i| (0..parts).map(move |j| (i, j))).collect();
        pairs.retain(|&(i, j)| products == parts * parts || i + j < parts);
        pairs.sort_by_key(|&(i, j)| (std::cmp::Reverse(i + j), std::cmp::Reverse(i)));
        debug_assert_eq!(pairs.len(), products);
        let acc = ShapedArray::new(&out.shape, w);
        let mut sum: Option<Val> = None;
        for (i, j) in pairs {
            let prod = self.dot(&lp[i], &rp[j], &acc, dims)?;
            sum = Some(match sum {
                None => prod,
                Some(s) => {
                    let t = w.mlir();
                    self.ew(&acc, &[s, prod], &mut |e, a| Ok(e.op(&format!("arith.addf {}, {} : {t}", a[0], a[1]))))?
                }
            });
        }
        let sum = sum.expect("at least one product");
        let sum = if out_round == Round::None { sum } else { self.round_tensor(&sum, out_round)? };
        self.cast_tensor(&sum, out.dtype)
    }

    /// Splits `x` (of dtype f32 or f64) into `n` parts rounded to `r`, largest first.
    fn split(&mut self, x: &Val, n: usize, r: Round) -> Result<Vec<Val>, Error> {
        let mut parts: Vec<Val> = vec![];
        for _ in 0..n {
            let a = x.aval().clone();
            let mut ins = vec![x.clone()];
            ins.extend(parts.iter().cloned());
            let t = a.dtype.mlir();
            let v = self.ew(&a, &ins, &mut |e, s| {
                let mut rest = s[0].clone();
                for p in &s[1..] {
                    rest = e.op(&format!("arith.subf {rest}, {p} : {t}"));
                }
                Ok(round_scalar(e, &rest, a.dtype, r))
            })?;
            parts.push(v);
        }
        Ok(parts)
    }

    fn round_tensor(&mut self, x: &Val, r: Round) -> Result<Val, Error> {
        let a = x.aval().clone();
        self.ew(&a, std::slice::from_ref(x), &mut |e, s| Ok(round_scalar(e, &s[0], a.dtype, r)))
    }
}

/// Rounds the f32/f64 scalar `x` to the format `r` (to nearest, ties to even) and returns
/// it in `d` again. TF32 (1 sign, 8 exponent, 10 mantissa bits) is rounded on the f32
/// bits: add `0xFFF + lsb` and clear the low 13 bits; NaNs pass through unchanged.
fn round_scalar(e: &mut super::emit::Emitter, x: &str, d: DType, r: Round) -> String {
    let narrow = |e: &mut super::emit::Emitter, x: &str| -> String {
        if d == DType::F64 {
            e.op(&format!("arith.truncf {x} : f64 to f32"))
        } else {
            x.to_string()
        }
    };
    let widen = |e: &mut super::emit::Emitter, x: &str| -> String {
        if d == DType::F64 {
            e.op(&format!("arith.extf {x} : f32 to f64"))
        } else {
            x.to_string()
        }
    };
    match r {
        Round::None => x.to_string(),
        Round::F32 => {
            let n = narrow(e, x);
            widen(e, &n)
        }
        Round::Bf16 | Round::F16 => {
            let h = if r == Round::Bf16 { "bf16" } else { "f16" };
            let n = narrow(e, x);
            let t = e.op(&format!("arith.truncf {n} : f32 to {h}"));
            let b = e.op(&format!("arith.extf {t} : {h} to f32"));
            widen(e, &b)
        }
        Round::Tf32 => {
            let n = narrow(e, x);
            let bits = e.op(&format!("arith.bitcast {n} : f32 to i32"));
            let c13 = e.scalar_const("13", DType::I32);
            let c1 = e.scalar_const("1", DType::I32);
            let cbias = e.scalar_const("4095", DType::I32);
            let cmask = e.scalar_const("-8192", DType::I32);
            let sh = e.op(&format!("arith.shrui {bits}, {c13} : i32"));
            let lsb = e.op(&format!("arith.andi {sh}, {c1} : i32"));
            let bias = e.op(&format!("arith.addi {cbias}, {lsb} : i32"));
            let up = e.op(&format!("arith.addi {bits}, {bias} : i32"));
            let m = e.op(&format!("arith.andi {up}, {cmask} : i32"));
            let f = e.op(&format!("arith.bitcast {m} : i32 to f32"));
            let nan = e.op(&format!("arith.cmpf uno, {n}, {n} : f32"));
            let s = e.op(&format!("arith.select {nan}, {n}, {f} : f32"));
            widen(e, &s)
        }
    }
}
