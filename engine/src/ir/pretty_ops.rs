//! Params of the array-language primitives (issue 3) as JAX 0.10 prints them:
//! `concatenate[dimension=0]`, `pad[padding_config=((1, 1, 0),)]`,
//! `argmax[axes=(0,) index_dtype=int32]`, `cumsum[axis=0 reverse=False]`, ...
//! `pretty::params` falls back to `params` here and sorts the result.

use super::jaxpr::Primitive;
use super::pretty::py_tuple;

fn b(v: bool) -> String {
    if v { "True" } else { "False" }.into()
}

fn pairs(xs: &[(i64, i64)]) -> String {
    let v: Vec<String> = xs.iter().map(|(l, h)| format!("({l}, {h})")).collect();
    match v.len() {
        1 => format!("({},)", v[0]),
        _ => format!("({})", v.join(", ")),
    }
}

fn kv(k: &str, v: String) -> (String, String) {
    (k.to_string(), v)
}

/// Unsorted `(name, value)` params of an issue-3 primitive (empty for the others).
pub fn params(p: &Primitive) -> Vec<(String, String)> {
    use Primitive::*;
    match p {
        BitcastConvertType { new_dtype } => vec![kv("new_dtype", new_dtype.name().into())],
        // JAX 0.10.2: `device_put[copy_semantics=(ArrayCopySemantics.REUSE_INPUT,)
        // devices=(MemorySpace.Host,) srcs=(None,)]` for `jax.memory.Space.Host`.
        DevicePut { memory_kind } => vec![
            kv("copy_semantics", "(ArrayCopySemantics.REUSE_INPUT,)".into()),
            kv("devices", format!("({},)", crate::runtime::memory_kind::space_name(*memory_kind))),
            kv("srcs", "(None,)".into()),
        ],
        Round { rounding_method } => vec![kv("rounding_method", rounding_method.to_string())],
        IntegerPow { y } => vec![kv("y", y.to_string())],
        ReducePrecision { exponent_bits, mantissa_bits } => {
            vec![kv("exponent_bits", exponent_bits.to_string()), kv("mantissa_bits", mantissa_bits.to_string())]
        }
        ReduceProd { axes } | ReduceAnd { axes } | ReduceOr { axes } => {
            vec![kv("axes", py_tuple(axes)), kv("out_sharding", "None".into())]
        }
        ArgMax { axes, index_dtype } | ArgMin { axes, index_dtype } => {
            vec![kv("axes", py_tuple(axes)), kv("index_dtype", index_dtype.name().into())]
        }
        Cumulative { axis, reverse, .. } => vec![kv("axis", axis.to_string()), kv("reverse", b(*reverse))],
        Concatenate { dimension } => vec![kv("dimension", dimension.to_string())],
        Pad { padding_config } => {
            let v: Vec<String> = padding_config.iter().map(|(l, h, i)| format!("({l}, {h}, {i})")).collect();
            let t = if v.len() == 1 { format!("({},)", v[0]) } else { format!("({})", v.join(", ")) };
            vec![kv("padding_config", t)]
        }
        Rev { dimensions } | Squeeze { dimensions } => vec![kv("dimensions", py_tuple(dimensions))],
        Slice { start_indices, limit_indices, strides } => vec![
            kv("limit_indices", py_tuple(limit_indices)),
            kv("start_indices", py_tuple(start_indices)),
            kv("strides", strides.as_ref().map(|s| py_tuple(s)).unwrap_or("None".into())),
        ],
        DynamicSlice { slice_sizes } => vec![kv("slice_sizes", py_tuple(slice_sizes))],
        Split { sizes, axis } => vec![kv("axis", axis.to_string()), kv("sizes", py_tuple(sizes))],
        Gather { dimension_numbers, slice_sizes, mode, fill_value, indices_are_sorted, unique_indices } => vec![
            kv("dimension_numbers", dimension_numbers.text()),
            kv("fill_value", fill_value.map(|f| format!("{f:?}")).unwrap_or("None".into())),
            kv("indices_are_sorted", b(*indices_are_sorted)),
            kv("mode", mode.text().into()),
            kv("slice_sizes", py_tuple(slice_sizes)),
            kv("unique_indices", b(*unique_indices)),
        ],
        Scatter { dimension_numbers, mode, indices_are_sorted, unique_indices, .. } => vec![
            kv("dimension_numbers", dimension_numbers.text()),
            kv("indices_are_sorted", b(*indices_are_sorted)),
            kv("mode", mode.text().into()),
            kv("unique_indices", b(*unique_indices)),
            kv("update_consts", "()".into()),
            kv("update_jaxpr", "None".into()),
        ],
        Sort { dimension, is_stable, num_keys } => vec![
            kv("dimension", dimension.to_string()),
            kv("is_stable", b(*is_stable)),
            kv("num_keys", num_keys.to_string()),
        ],
        TopK { k } => vec![kv("k", k.to_string())],
        ConvGeneralDilated {
            window_strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dimension_numbers,
            feature_group_count,
            batch_group_count,
            preferred_element_type,
        } => vec![
            kv("batch_group_count", batch_group_count.to_string()),
            kv("dimension_numbers", dimension_numbers.text()),
            kv("feature_group_count", feature_group_count.to_string()),
            kv("lhs_dilation", py_tuple(lhs_dilation)),
            kv("padding", pairs(padding)),
            kv("precision", "None".into()),
            kv("preferred_element_type", preferred_element_type.map(|d| d.name().to_string()).unwrap_or("None".into())),
            kv("rhs_dilation", py_tuple(rhs_dilation)),
            kv("window_strides", py_tuple(window_strides)),
        ],
        ShardingConstraint { sharding } => vec![kv("sharding", format!("{sharding:?}"))],
        ReduceWindow { window_dimensions, window_strides, padding, base_dilation, window_dilation, .. } => vec![
            kv("base_dilation", py_tuple(base_dilation)),
            kv("padding", pairs(padding)),
            kv("window_dilation", py_tuple(window_dilation)),
            kv("window_dimensions", py_tuple(window_dimensions)),
            kv("window_strides", py_tuple(window_strides)),
        ],
        _ => vec![],
    }
}
