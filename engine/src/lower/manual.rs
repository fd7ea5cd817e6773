//! Display lowering of `shard_map` and collectives, as JAX's lowered text shows them: a
//! `shard_map` equation becomes one `sdy.manual_computation` region (its operands' global
//! types outside, the body on per-device blocks inside, with `in_shardings`,
//! `out_shardings` and `manual_axes`), and each collective the StableHLO op XLA
//! partitions (`stablehlo.all_reduce`, `all_gather`, `reduce_scatter`,
//! `collective_permute`, `all_to_all`; `axis_index` from `stablehlo.partition_id`), with
//! `replica_groups` of partition ids (flat, row-major mesh positions) and a fresh
//! `channel_handle` each.
//!
//! Invariant: this text is for `Lowered::as_text` and `%lower` only. A module holding a
//! manual computation is never compiled (`pipeline::compile_lowered` refuses it): a
//! `shard_map` program runs as per-device segments cut at its collectives (`partition.rs`).

use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{Collective, DType, ShapedArray, ShardMapParams, Var};
use crate::sharding::Mesh;

/// Marks a lowered module that holds a manual computation (display only).
pub(crate) const MANUAL_MARK: &str = "sdy.manual_computation(";

/// Shardy's sharding text without the `#sdy.sharding` prefix, on mesh symbol `sym`:
/// `<@mesh, [{"i"}, {}]>`.
pub(crate) fn sdy_dims(sym: &str, dims: &crate::sharding_rules::Dims) -> String {
    let parts: Vec<String> =
        dims.iter().map(|e| format!("{{{}}}", e.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", "))).collect();
    format!("<@{sym}, [{}]>", parts.join(", "))
}

/// `sdy.mesh @mesh = <["i"=4, "j"=2]>` for mesh symbol `sym`.
pub(crate) fn sdy_mesh(sym: &str, mesh: &Mesh) -> String {
    format!("sdy.mesh @{sym} = {}", sdy_mesh_value(mesh))
}

/// The mesh attribute of a `sdy.mesh` declaration: `<["i"=4, "j"=2]>`.
pub(crate) fn sdy_mesh_value(mesh: &Mesh) -> String {
    let axes: Vec<String> = mesh.axis_names().iter().zip(mesh.axis_sizes()).map(|(n, s)| format!("\"{n}\"={s}")).collect();
    format!("<[{}]>", axes.join(", "))
}

/// The symbol of the `k`-th distinct mesh of a module, as Shardy names them in order of
/// first use: `mesh`, `mesh_0`, `mesh_1`, ….
pub(crate) fn mesh_symbol(k: usize) -> String {
    if k == 0 {
        "mesh".to_string()
    } else {
        format!("mesh_{}", k - 1)
    }
}

/// The groups of partition ids (flat row-major mesh positions) a collective over `axes`
/// runs in: members vary over `axes` (in that order), the other coordinates fixed; groups
/// ordered by their first member. Errors: an axis not in the mesh.
pub(crate) fn replica_groups(mesh: &Mesh, axes: &[String]) -> Result<Vec<Vec<usize>>, Error> {
    let names = mesh.axis_names();
    let ks: Vec<usize> = axes
        .iter()
        .map(|a| names.iter().position(|n| n == a).ok_or_else(|| malformed(format!("collective over axis '{a}' outside a shard_map on a mesh with it"))))
        .collect::<Result<_, _>>()?;
    let mut groups: Vec<Vec<usize>> = vec![];
    let mut seen = vec![false; mesh.size()];
    for start in 0..mesh.size() {
        if seen[start] {
            continue;
        }
        let g = mesh.group_members(start, &ks);
        for &m in &g {
            seen[m] = true;
        }
        groups.push(g);
    }
    Ok(groups)
}

/// `dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>`.
fn groups_attr(groups: &[Vec<usize>]) -> String {
    let rows: Vec<String> = groups.iter().map(|g| format!("[{}]", g.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))).collect();
    format!("dense<[{}]> : tensor<{}x{}xi64>", rows.join(", "), groups.len(), groups.first().map_or(0, |g| g.len()))
}

impl Lowerer {
    /// The `sdy.mesh` symbol of `mesh` in this module, declaring it on first use (each
    /// distinct mesh its own symbol, `mesh_symbol`).
    fn mesh_sym(&mut self, mesh: &Mesh) -> String {
        let k = match self.meshes.iter().position(|m| m == mesh) {
            Some(k) => k,
            None => {
                self.meshes.push(mesh.clone());
                self.meshes.len() - 1
            }
        };
        mesh_symbol(k)
    }

    fn mesh_for(&self, what: &str) -> Result<Mesh, Error> {
        self.manual.last().cloned().ok_or_else(|| malformed(format!("`{what}` outside a shard_map")))
    }

    fn block_arg(&mut self) -> String {
        let n = self.next_arg;
        self.next_arg += 1;
        format!("%arg{n}")
    }

    /// A `shard_map` equation as one `sdy.manual_computation` region.
    pub(super) fn manual_computation(&mut self, sm: &ShardMapParams, ins: &[Val], outs: &[Var]) -> Result<Vec<Val>, Error> {
        let body = &sm.jaxpr;
        if ins.len() != body.invars.len() || outs.len() != body.outvars.len() {
            return Err(malformed(format!("shard_map with {} operands for {} body inputs", ins.len(), body.invars.len())));
        }
        let sym = self.mesh_sym(&sm.mesh);
        let operands: Vec<String> = ins.iter().map(|v| self.tensor(v)).collect();
        let in_tys: Vec<String> = ins.iter().map(|v| v.aval().strong().mlir_tensor()).collect();
        let out_tys: Vec<String> = outs.iter().map(|v| v.aval.strong().mlir_tensor()).collect();
        let dims = |s: &crate::sharding::PartitionSpec, nd: usize| sdy_dims(&sym, &crate::sharding_rules::dims_of(s, nd));
        let in_sh: Vec<String> = sm.in_specs.iter().zip(ins).map(|(s, v)| dims(s, v.aval().ndim())).collect();
        let out_sh: Vec<String> = sm.out_specs.iter().zip(outs).map(|(s, v)| dims(s, v.aval.ndim())).collect();
        let manual: Vec<String> = sm.mesh.axis_names().iter().map(|a| format!("\"{a}\"")).collect();
        let mut args = vec![];
        let mut decl = vec![];
        for v in &body.invars {
            let a = self.block_arg();
            decl.push(format!("{a}: {}", v.aval.strong().mlir_tensor()));
            args.push(Val::T(a, v.aval.strong()));
        }
        let n = self.e.fresh("");
        let head = match outs.len() {
            0 => String::new(),
            1 => format!("{n} = "),
            k => format!("{n}:{k} = "),
        };
        self.e.line(&format!(
            "{head}{MANUAL_MARK}{}) in_shardings=[{}] out_shardings=[{}] manual_axes={{{}}} ({}) {{",
            operands.join(", "),
            in_sh.join(", "),
            out_sh.join(", "),
            manual.join(", "),
            decl.join(", ")
        ));
        let saved = self.lits.clone();
        self.manual.push(sm.mesh.clone());
        self.e.push();
        let r = self.body(body, &[], args);
        let r = r.map(|vals| {
            let names: Vec<String> = vals.iter().map(|v| self.tensor(v)).collect();
            let tys: Vec<String> = vals.iter().map(|v| v.aval().strong().mlir_tensor()).collect();
            self.e.line(&format!("sdy.return {} : {}", names.join(", "), tys.join(", ")));
        });
        self.e.pop();
        self.manual.pop();
        self.lits = saved;
        r?;
        let res = if out_tys.len() == 1 { out_tys[0].clone() } else { format!("({})", out_tys.join(", ")) };
        self.e.line(&format!("}} : ({}) -> {res}", in_tys.join(", ")));
        Ok(outs
            .iter()
            .enumerate()
            .map(|(i, v)| Val::T(if outs.len() == 1 { n.clone() } else { format!("{n}#{i}") }, v.aval.strong()))
            .collect())
    }

    fn channel(&mut self) -> String {
        self.channels += 1;
        format!("channel_handle = #stablehlo.channel_handle<handle = {}, type = 1>", self.channels)
    }

    /// The `^bb0(..): op; stablehlo.return` region of a reducing collective.
    fn reducer(&mut self, op: &str, d: DType) {
        let t = format!("tensor<{}>", d.mlir());
        let (a, b) = (self.block_arg(), self.block_arg());
        self.e.line(&format!("^bb0({a}: {t}, {b}: {t}):"));
        self.e.push();
        let r = self.e.fresh("");
        self.e.line(&format!("{r} = stablehlo.{op} {a}, {b} : {t}"));
        self.e.line(&format!("stablehlo.return {r} : {t}"));
        self.e.pop();
    }

    /// One collective as its StableHLO op (see the module doc).
    pub(super) fn collective(&mut self, c: &Collective, ins: &[Val], outs: &[Var]) -> Result<Vec<Val>, Error> {
        let mesh = self.mesh_for(c.name())?;
        let out = match outs {
            [o] => o.aval.strong(),
            _ => return Err(malformed(format!("`{}` needs one output", c.name()))),
        };
        let groups = groups_attr(&replica_groups(&mesh, c.axes())?);
        if let Collective::AxisIndex { axes } = c {
            return Ok(vec![self.axis_index(&mesh, axes, &out)?]);
        }
        if let (Collective::Pvary { .. }, [x]) = (c, ins) {
            // A type change only: no data moves.
            return Ok(vec![x.clone()]);
        }
        let x = ins.first().ok_or_else(|| malformed(format!("`{}` needs an operand", c.name())))?;
        let (xn, xt, ot) = (self.tensor(x), x.aval().strong().mlir_tensor(), out.mlir_tensor());
        let ch = self.channel();
        let n = self.e.fresh("");
        match c {
            Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } | Collective::ReduceScatter { .. } => {
                let op = match c {
                    Collective::Pmax { .. } => "maximum",
                    Collective::Pmin { .. } => "minimum",
                    _ if out.dtype == DType::Bool => "or",
                    _ => "add",
                };
                let (name, extra) = match c {
                    Collective::ReduceScatter { scatter_dimension, .. } => ("reduce_scatter", format!("scatter_dimension = {scatter_dimension} : i64, ")),
                    _ => ("all_reduce", String::new()),
                };
                self.e.line(&format!("{n} = \"stablehlo.{name}\"({xn}) <{{{ch}, replica_groups = {groups}, {extra}use_global_device_ids}}> ({{"));
                self.reducer(op, out.dtype);
                self.e.line(&format!("}}) : ({xt}) -> {ot}"));
            }
            Collective::AllGather { dimension, .. } => {
                self.e.line(&format!(
                    "{n} = \"stablehlo.all_gather\"({xn}) <{{all_gather_dim = {dimension} : i64, {ch}, replica_groups = {groups}, use_global_device_ids}}> : ({xt}) -> {ot}"
                ));
            }
            Collective::AllToAll { axis_size, split_axis, concat_axis, .. } => {
                self.e.line(&format!(
                    "{n} = \"stablehlo.all_to_all\"({xn}) <{{{ch}, concat_dimension = {concat_axis} : i64, replica_groups = {groups}, split_count = {axis_size} : i64, split_dimension = {split_axis} : i64}}> : ({xt}) -> {ot}"
                ));
            }
            Collective::Ppermute { axes, perm } => {
                // Pairs of partition ids: every group applies the same permutation of positions.
                let mut pairs = vec![];
                for g in replica_groups(&mesh, axes)? {
                    for &(s, d) in perm {
                        if let (Some(a), Some(b)) = (g.get(s), g.get(d)) {
                            pairs.push(format!("[{a}, {b}]"));
                        }
                    }
                }
                self.e.line(&format!(
                    "{n} = \"stablehlo.collective_permute\"({xn}) <{{{ch}, source_target_pairs = dense<[{}]> : tensor<{}x2xi64>}}> : ({xt}) -> {ot}",
                    pairs.join(", "),
                    pairs.len()
                ));
            }
            Collective::AxisIndex { .. } | Collective::Pvary { .. } => unreachable!("handled above"),
        }
        Ok(vec![Val::T(n, out)])
    }

    /// `axis_index`: this partition's position along `axes` (`partition_id / stride % size`).
    fn axis_index(&mut self, mesh: &Mesh, axes: &[String], out: &ShapedArray) -> Result<Val, Error> {
        let names = mesh.axis_names();
        let sizes = mesh.axis_sizes();
        let pid = self.e.op("stablehlo.partition_id : tensor<ui32>");
        let mut acc: Option<String> = None;
        let cst = |l: &mut Lowerer, v: usize| l.e.op(&format!("stablehlo.constant dense<{v}> : tensor<ui32>"));
        for a in axes {
            let k = names.iter().position(|n| n == a).ok_or_else(|| malformed(format!("axis_index over unknown axis '{a}'")))?;
            let stride: usize = sizes[k + 1..].iter().product();
            let s = cst(self, stride);
            let q = self.e.op(&format!("stablehlo.divide {pid}, {s} : tensor<ui32>"));
            let m = cst(self, sizes[k]);
            let r = self.e.op(&format!("stablehlo.remainder {q}, {m} : tensor<ui32>"));
            acc = Some(match acc {
                None => r,
                Some(prev) => {
                    let m2 = cst(self, sizes[k]);
                    let t = self.e.op(&format!("stablehlo.multiply {prev}, {m2} : tensor<ui32>"));
                    self.e.op(&format!("stablehlo.add {t}, {r} : tensor<ui32>"))
                }
            });
        }
        let v = acc.unwrap_or_else(|| cst(self, 0));
        let n = self.e.op(&format!("stablehlo.convert {v} : (tensor<ui32>) -> {}", out.mlir_tensor()));
        Ok(Val::T(n, out.clone()))
    }
}
