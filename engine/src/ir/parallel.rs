//! Params of the collective primitives (`psum`, `all_gather`, ...) and of `shard_map`,
//! and how JAX prints them: `psum[axes=('i',) axis_index_groups=None]`,
//! `all_gather[all_gather_dimension=0 axis_index_groups=None axis_name=('i',) axis_size=4 tiled=True]`.
//! Invariant: a collective names mesh axes only; the axis sizes it needs for its type
//! are recorded when it is traced, so abstract evaluation needs no axis environment.

use super::jaxpr::Jaxpr;
use crate::sharding::{Mesh, PartitionSpec};

/// A collective over named mesh axes, inside `shard_map` (`jax.lax` parallel operators).
/// `axes` lists the mesh axes the collective runs over, in the order given; the group of a
/// device is the devices that share its coordinates on every other mesh axis, ordered by
/// the row-major index of their coordinates on `axes`.
#[derive(Clone, Debug, PartialEq)]
pub enum Collective {
    /// Sum over the group; every member gets the sum (`psum`).
    Psum { axes: Vec<String> },
    /// Elementwise maximum over the group (`pmax`).
    Pmax { axes: Vec<String> },
    /// Elementwise minimum over the group (`pmin`).
    Pmin { axes: Vec<String> },
    /// Concatenation (`tiled`) or stacking of the members' values along `dimension`
    /// (`all_gather`); `axis_size` is the group size.
    AllGather { axes: Vec<String>, axis_size: usize, dimension: usize, tiled: bool },
    /// Sum over the group, member k keeping block k along `scatter_dimension`
    /// (`psum_scatter`, printed `reduce_scatter`).
    ReduceScatter { axes: Vec<String>, axis_size: usize, scatter_dimension: usize, tiled: bool },
    /// Sends each member's value along `perm` pairs `(source, destination)` of group
    /// positions; members that receive nothing get zeros (`ppermute`).
    Ppermute { axes: Vec<String>, perm: Vec<(usize, usize)> },
    /// Splits along `split_axis` into `axis_size` blocks, sends block k to member k, and
    /// concatenates the received blocks along `concat_axis` (`all_to_all`, tiled form).
    AllToAll { axes: Vec<String>, axis_size: usize, split_axis: usize, concat_axis: usize, tiled: bool },
    /// The position of this device in the group of `axes` (int32, `axis_index`).
    AxisIndex { axes: Vec<String> },
    /// Marks an invariant value as varying over `axes` (`pcast(x, axes, to='varying')`,
    /// printed `pvary`): the value is unchanged, only its varying manual axes grow. No
    /// data moves between devices.
    Pvary { axes: Vec<String> },
}

impl Collective {
    /// JAX's primitive name.
    pub fn name(&self) -> &'static str {
        match self {
            Collective::Psum { .. } => "psum",
            Collective::Pmax { .. } => "pmax",
            Collective::Pmin { .. } => "pmin",
            Collective::AllGather { .. } => "all_gather",
            Collective::ReduceScatter { .. } => "reduce_scatter",
            Collective::Ppermute { .. } => "ppermute",
            Collective::AllToAll { .. } => "all_to_all",
            Collective::AxisIndex { .. } => "axis_index",
            Collective::Pvary { .. } => "pvary",
        }
    }

    /// The mesh axes the collective runs over.
    pub fn axes(&self) -> &[String] {
        match self {
            Collective::Psum { axes }
            | Collective::Pmax { axes }
            | Collective::Pmin { axes }
            | Collective::AllGather { axes, .. }
            | Collective::ReduceScatter { axes, .. }
            | Collective::Ppermute { axes, .. }
            | Collective::AllToAll { axes, .. }
            | Collective::AxisIndex { axes }
            | Collective::Pvary { axes } => axes,
        }
    }

    /// Unsorted `(name, value)` params as JAX prints them.
    pub fn params(&self) -> Vec<(String, String)> {
        let names = names_tuple(self.axes());
        let kv = |k: &str, v: String| (k.to_string(), v);
        let b = |v: bool| if v { "True" } else { "False" }.to_string();
        match self {
            Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } => {
                vec![kv("axes", names), kv("axis_index_groups", "None".into())]
            }
            Collective::AllGather { axis_size, dimension, tiled, .. } => vec![
                kv("all_gather_dimension", dimension.to_string()),
                kv("axis_index_groups", "None".into()),
                kv("axis_name", names),
                kv("axis_size", axis_size.to_string()),
                kv("tiled", b(*tiled)),
            ],
            Collective::ReduceScatter { axis_size, scatter_dimension, tiled, .. } => vec![
                kv("axis_index_groups", "None".into()),
                kv("axis_name", names),
                kv("axis_size", axis_size.to_string()),
                kv("scatter_dimension", scatter_dimension.to_string()),
                kv("tiled", b(*tiled)),
            ],
            Collective::Ppermute { perm, .. } => {
                let ps: Vec<String> = perm.iter().map(|(s, d)| format!("({s}, {d})")).collect();
                let perm = if ps.len() == 1 { format!("({},)", ps[0]) } else { format!("({})", ps.join(", ")) };
                vec![kv("axis_name", names), kv("perm", perm)]
            }
            Collective::AllToAll { split_axis, concat_axis, tiled, .. } => vec![
                kv("axis_index_groups", "None".into()),
                kv("axis_name", names),
                kv("concat_axis", concat_axis.to_string()),
                kv("split_axis", split_axis.to_string()),
                kv("tiled", b(*tiled)),
            ],
            Collective::AxisIndex { axes } => {
                let n = if axes.len() == 1 { axes[0].clone() } else { names };
                vec![kv("axis_name", n)]
            }
            Collective::Pvary { .. } => vec![kv("axes", names)],
        }
    }
}

/// Python tuple of axis names: `('i',)`, `('i', 'j')`.
pub fn names_tuple(axes: &[String]) -> String {
    let q: Vec<String> = axes.iter().map(|a| format!("'{a}'")).collect();
    if q.len() == 1 {
        format!("({},)", q[0])
    } else {
        format!("({})", q.join(", "))
    }
}

/// The params of a `shard_map` equation: the per-device body, the mesh, one spec per
/// operand and per result, and whether replication of results was checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardMapParams {
    /// The body on per-device blocks; closes over nothing (its constants are operands
    /// with spec `P()`).
    pub jaxpr: Jaxpr,
    pub mesh: Mesh,
    pub in_specs: Vec<PartitionSpec>,
    pub out_specs: Vec<PartitionSpec>,
    pub check_vma: bool,
    /// The user function's name, for error messages.
    pub name: String,
}

impl ShardMapParams {
    /// Unsorted printed params (the body is printed as `jaxpr=` by the printer).
    pub fn params(&self) -> Vec<(String, String)> {
        let specs = |s: &[PartitionSpec]| {
            let v: Vec<String> = s.iter().map(|p| format!("{p:?}")).collect();
            if v.len() == 1 {
                format!("({},)", v[0])
            } else {
                format!("({})", v.join(", "))
            }
        };
        let axes: Vec<String> = self.mesh.axis_names().iter().map(|a| format!("'{a}'")).collect();
        vec![
            ("check_vma".into(), if self.check_vma { "True" } else { "False" }.into()),
            ("in_specs".into(), specs(&self.in_specs)),
            ("mesh".into(), abstract_mesh(&self.mesh)),
            ("newly_manual_axes".into(), format!("frozenset({{{}}})", axes.join(", "))),
            ("out_specs".into(), specs(&self.out_specs)),
        ]
    }
}

/// `AbstractMesh('i': 2, axis_types=(Explicit,), device_kind=cpu, num_cores=None, platform=cpu)`,
/// as a jaxpr prints a `shard_map`'s mesh.
pub fn abstract_mesh(m: &Mesh) -> String {
    let shown = format!("{m}");
    let inner = shown.strip_prefix("Mesh(").and_then(|s| s.strip_suffix(')')).unwrap_or(&shown);
    format!("AbstractMesh({inner}, device_kind=cpu, num_cores=None, platform=cpu)")
}
