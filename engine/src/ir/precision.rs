//! Precision of contractions: JAX's `lax.Precision` levels and `lax.DotAlgorithmPreset`
//! algorithms, as the `precision` param of `dot_general`.
//!
//! The names, aliases and printed forms are JAX's (`jax/_src/lax/lax.py`, jax 0.10):
//! levels print as `precision=(Precision.HIGHEST, Precision.HIGHEST)` in a jaxpr and
//! `precision = [HIGHEST, HIGHEST]` in lowered text; presets print by name in a jaxpr
//! (`precision=BF16_BF16_F32`) and as StableHLO's `algorithm = <...>` tuple when lowered.

use crate::error::{Error, Result};

/// `lax.Precision`: a per-operand precision level. On TPU DEFAULT is one bf16 pass,
/// HIGH three (bf16_3x) and HIGHEST six; on GPU DEFAULT/HIGH are TF32 and HIGHEST f32.
/// On CPU all three compute in the operands' own precision (as XLA:CPU does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    Default,
    High,
    Highest,
}

impl Precision {
    /// The level's name, `DEFAULT`/`HIGH`/`HIGHEST`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Default => "DEFAULT",
            Precision::High => "HIGH",
            Precision::Highest => "HIGHEST",
        }
    }

    /// Parses a level as `lax.Precision(str)` does: `default`/`fastest`/`bfloat16`,
    /// `high`/`bfloat16_3x`/`tensorfloat32`, `highest`/`float32` (any case).
    /// Errors: `ValueError` listing the accepted names.
    pub fn parse(s: &str) -> Result<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "default" | "fastest" | "bfloat16" => Ok(Precision::Default),
            "high" | "bfloat16_3x" | "tensorfloat32" => Ok(Precision::High),
            "highest" | "float32" => Ok(Precision::Highest),
            _ => Err(Error::value_error(format!(
                "Unrecognized precision: '{s}'. Expected one of 'default'/'fastest'/'bfloat16', \
                 'high'/'bfloat16_3x'/'tensorfloat32', 'highest'/'float32', or a DotAlgorithmPreset name \
                 such as 'BF16_BF16_F32'"
            ))),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Precision.{}", self.name())
    }
}

macro_rules! presets {
    ($($v:ident = $name:literal, $lhs:literal, $acc:literal, $ops:literal, $doc:literal;)+) => {
        /// `lax.DotAlgorithmPreset`: an explicit dot algorithm, named
        /// `<input types>_<accumulation type>[_X<number of products>]`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DotAlgorithmPreset {
            $(#[doc = $doc] $v,)+
        }
        impl DotAlgorithmPreset {
            /// Every preset, in JAX's order.
            pub const ALL: &'static [DotAlgorithmPreset] = &[$(DotAlgorithmPreset::$v),+];
            /// JAX's name, e.g. `BF16_BF16_F32_X3`.
            pub fn name(self) -> &'static str {
                match self { $(DotAlgorithmPreset::$v => $name,)+ }
            }
            /// (operand storage type, accumulation type, primitive products) as in
            /// StableHLO's `#stablehlo.dot_algorithm` (`None` for DEFAULT).
            fn parts(self) -> (&'static str, &'static str, u32) {
                match self { $(DotAlgorithmPreset::$v => ($lhs, $acc, $ops),)+ }
            }
        }
    };
}

presets! {
    Default = "DEFAULT", "", "", 0, "the backend's default algorithm for the operand types";
    AnyF8AnyF8F32 = "ANY_F8_ANY_F8_F32", "f8", "f32", 1, "any 8-bit float inputs, f32 accumulation (not available on CPU)";
    AnyF8AnyF8F32FastAccum = "ANY_F8_ANY_F8_F32_FAST_ACCUM", "f8", "f32", 1, "as above with fast (imprecise) accumulation (not available on CPU)";
    AnyF8AnyF8Any = "ANY_F8_ANY_F8_ANY", "f8", "any", 1, "8-bit float inputs, any accumulation (not available on CPU)";
    AnyF8AnyF8AnyFastAccum = "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "f8", "any", 1, "as above with fast accumulation (not available on CPU)";
    F16F16F16 = "F16_F16_F16", "f16", "f16", 1, "f16 inputs and f16 result (emulated: f16-rounded inputs, f32 accumulation, f16-rounded result)";
    F16F16F32 = "F16_F16_F32", "f16", "f32", 1, "f16-rounded inputs, f32 accumulation";
    Bf16Bf16Bf16 = "BF16_BF16_BF16", "bf16", "bf16", 1, "bf16 inputs and result (emulated: bf16-rounded inputs, f32 accumulation, bf16-rounded result)";
    Bf16Bf16F32 = "BF16_BF16_F32", "bf16", "f32", 1, "bf16-rounded inputs, f32 accumulation (one TPU MXU pass; DEFAULT on TPU)";
    Bf16Bf16F32X3 = "BF16_BF16_F32_X3", "bf16", "f32", 3, "each input split into 2 bf16 parts, 3 products (HIGH on TPU)";
    Bf16Bf16F32X6 = "BF16_BF16_F32_X6", "bf16", "f32", 6, "each input split into 3 bf16 parts, 6 products (HIGHEST on TPU)";
    Bf16Bf16F32X9 = "BF16_BF16_F32_X9", "bf16", "f32", 9, "each input split into 3 bf16 parts, all 9 products";
    Tf32Tf32F32 = "TF32_TF32_F32", "tf32", "f32", 1, "tf32-rounded inputs (10-bit mantissa), f32 accumulation (GPU tensor cores)";
    Tf32Tf32F32X3 = "TF32_TF32_F32_X3", "tf32", "f32", 3, "each input split into 2 tf32 parts, 3 products";
    F32F32F32 = "F32_F32_F32", "f32", "f32", 1, "f32 inputs and accumulation";
    F64F64F64 = "F64_F64_F64", "f64", "f64", 1, "f64 inputs and accumulation (f32 operands are widened exactly; the result is rounded to the output dtype)";
}

impl DotAlgorithmPreset {
    /// Parses a preset name (any case), e.g. `"BF16_BF16_F32_X3"`.
    pub fn parse(s: &str) -> Option<DotAlgorithmPreset> {
        DotAlgorithmPreset::ALL.iter().copied().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Whether the CPU backend can honour (emulate) this preset: every preset but the
    /// 8-bit-float ones, whose operand format is not fixed by the name.
    pub fn supported_on_cpu(self) -> bool {
        !self.name().starts_with("ANY_F8")
    }

    /// The lowered form, StableHLO's dot algorithm attribute:
    /// `<lhs_precision_type = bf16, rhs_precision_type = bf16, accumulation_type = f32,
    /// lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 3,
    /// allow_imprecise_accumulation = false>` (empty for DEFAULT).
    pub fn hlo_attr(self) -> String {
        let (t, acc, ops) = self.parts();
        if self == DotAlgorithmPreset::Default {
            return String::new();
        }
        let fast = self.name().ends_with("FAST_ACCUM");
        format!(
            "<lhs_precision_type = {t}, rhs_precision_type = {t}, accumulation_type = {acc}, lhs_component_count = 1, \
             rhs_component_count = 1, num_primitive_operations = {ops}, allow_imprecise_accumulation = {fast}>"
        )
    }
}

impl std::fmt::Display for DotAlgorithmPreset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The `precision` param of `dot_general` (JAX's canonical precision): a level per
/// operand, or one algorithm preset. `None` in the param means "the default"
/// (`jax_default_matmul_precision` when lowered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DotPrecision {
    /// `(lhs, rhs)` levels.
    Levels(Precision, Precision),
    /// An explicit algorithm.
    Algorithm(DotAlgorithmPreset),
}

impl DotPrecision {
    /// Parses JAX's string forms: a level name/alias (both operands) or a preset name.
    /// As in JAX's `canonicalize_precision`, a level name wins over a preset: `"default"`
    /// is the level `DEFAULT` for both operands, and only the exact preset name
    /// `"DEFAULT"` is the preset. Errors: `ValueError` listing the accepted forms.
    pub fn parse(s: &str) -> Result<DotPrecision> {
        if s != DotAlgorithmPreset::Default.name()
            && let Ok(l) = Precision::parse(s)
        {
            return Ok(DotPrecision::Levels(l, l));
        }
        if let Some(p) = DotAlgorithmPreset::parse(s) {
            return Ok(DotPrecision::Algorithm(p));
        }
        let l = Precision::parse(s)?;
        Ok(DotPrecision::Levels(l, l))
    }

    /// The jaxpr form: `(Precision.HIGHEST, Precision.HIGHEST)` or `BF16_BF16_F32`.
    pub fn jaxpr_text(&self) -> String {
        match self {
            DotPrecision::Levels(a, b) => format!("({a}, {b})"),
            DotPrecision::Algorithm(p) => p.name().to_string(),
        }
    }

    /// The lowered form: `precision = [HIGHEST, HIGHEST]` or `algorithm = <...>`.
    pub fn lowered_text(&self) -> String {
        match self {
            DotPrecision::Levels(a, b) => format!("precision = [{}, {}]", a.name(), b.name()),
            DotPrecision::Algorithm(DotAlgorithmPreset::Default) => "algorithm = DEFAULT".into(),
            DotPrecision::Algorithm(p) => format!("algorithm = {}", p.hlo_attr()),
        }
    }

    /// The short form for tables and `%precision`: `highest`, `(high, default)`, or a preset name.
    pub fn short(&self) -> String {
        match self {
            DotPrecision::Levels(a, b) if a == b => a.name().to_ascii_lowercase(),
            DotPrecision::Levels(a, b) => format!("({}, {})", a.name().to_ascii_lowercase(), b.name().to_ascii_lowercase()),
            DotPrecision::Algorithm(p) => p.name().to_string(),
        }
    }
}

/// What `precision=` arguments accept (JAX's `PrecisionLike`): a level, a `(lhs, rhs)`
/// pair of levels, a preset, a [`DotPrecision`], `None` (the default) or a string
/// (`"highest"`, `"bfloat16_3x"`, `"BF16_BF16_F32"`, ...).
pub trait IntoPrecision {
    /// Errors: `ValueError` for an unknown string.
    fn into_precision(self) -> Result<Option<DotPrecision>>;
}

impl IntoPrecision for Precision {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        Ok(Some(DotPrecision::Levels(self, self)))
    }
}
impl IntoPrecision for (Precision, Precision) {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        Ok(Some(DotPrecision::Levels(self.0, self.1)))
    }
}
impl IntoPrecision for DotAlgorithmPreset {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        Ok(Some(DotPrecision::Algorithm(self)))
    }
}
impl IntoPrecision for DotPrecision {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        Ok(Some(self))
    }
}
impl IntoPrecision for Option<DotPrecision> {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        Ok(self)
    }
}
impl IntoPrecision for &str {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        DotPrecision::parse(self).map(Some)
    }
}
impl IntoPrecision for &String {
    fn into_precision(self) -> Result<Option<DotPrecision>> {
        DotPrecision::parse(self).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        assert_eq!(Precision::parse("bfloat16_3x").unwrap(), Precision::High);
        assert_eq!(DotPrecision::parse("highest").unwrap().jaxpr_text(), "(Precision.HIGHEST, Precision.HIGHEST)");
        assert_eq!(DotPrecision::parse("bf16_bf16_f32").unwrap().jaxpr_text(), "BF16_BF16_F32");
        assert_eq!(DotPrecision::parse("float32").unwrap().lowered_text(), "precision = [HIGHEST, HIGHEST]");
        assert_eq!(
            DotPrecision::Algorithm(DotAlgorithmPreset::Bf16Bf16F32).lowered_text(),
            "algorithm = <lhs_precision_type = bf16, rhs_precision_type = bf16, accumulation_type = f32, \
             lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, \
             allow_imprecise_accumulation = false>"
        );
        let e = DotPrecision::parse("medium").unwrap_err();
        assert!(e.to_string().contains("Unrecognized precision: 'medium'"), "{e}");
        assert_eq!(DotAlgorithmPreset::ALL.len(), 16);
    }
}
