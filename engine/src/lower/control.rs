//! Lowering of structured control flow to the `scf` dialect at tensor level: `cond` →
//! `scf.index_switch`, `while` → `scf.while`, `scan` → `scf.for` with the carry and the
//! stacked outputs as `iter_args` (slices taken with `tensor.extract_slice`, outputs
//! written with `tensor.insert_slice`). Loops stay loops: nothing is unrolled.
//!
//! Rank-0 carries (loop state, cond results) are element-typed SSA values (`f32`, `i32`,
//! …), not 0-d tensors, so a scalar loop keeps its state in registers instead of a
//! bufferized 0-d memref per iteration; a scan over a 1-D `xs` reads its element with
//! `tensor.extract` and writes a 0-d `y` with `tensor.insert`.
//!
//! Invariant: values defined inside a region never leak out of it; the scalar-literal
//! cache is saved and restored around every region for that reason.

use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{Jaxpr, Primitive, ShapedArray, Var};

fn results(n: &str, k: usize) -> Vec<String> {
    if k == 1 { vec![n.to_string()] } else { (0..k).map(|i| format!("{n}#{i}")).collect() }
}

fn head(n: &str, k: usize) -> String {
    match k {
        0 => String::new(),
        1 => format!("{n} = "),
        _ => format!("{n}:{k} = "),
    }
}

/// The MLIR type a carry of `a` travels as: its element type when 0-d, else its tensor.
fn carry_ty(a: &ShapedArray) -> String {
    if a.ndim() == 0 { a.dtype.mlir().to_string() } else { a.mlir_tensor() }
}

fn tys(avals: &[ShapedArray]) -> String {
    avals.iter().map(carry_ty).collect::<Vec<_>>().join(", ")
}

/// The value of a carry named `n` of `a` (see [`carry_ty`]).
fn carry_val(n: String, a: &ShapedArray) -> Val {
    if a.ndim() == 0 { Val::S(n, a.clone()) } else { Val::T(n, a.clone()) }
}

impl Lowerer {
    /// Lowers a sub-jaxpr inside a region; returns its outputs as carries (see
    /// [`carry_ty`]).
    fn region(&mut self, j: &Jaxpr, args: Vec<Val>) -> Result<Vec<String>, Error> {
        let saved = self.lits.clone();
        self.e.push();
        let outs = self.body(j, &[], args);
        let outs = outs.map(|o| o.iter().map(|v| self.carry(v)).collect::<Vec<_>>());
        self.e.pop();
        self.lits = saved;
        outs
    }

    /// `v` as a carry: a scalar when 0-d, else a tensor.
    fn carry(&mut self, v: &Val) -> String {
        if v.aval().ndim() == 0 { self.scalar_of(v) } else { self.tensor(v) }
    }

    fn yield_(&mut self, names: &[String], avals: &[ShapedArray]) {
        self.yield_tys(names, &tys(avals));
    }

    fn yield_tys(&mut self, names: &[String], tys: &str) {
        self.e.push();
        if names.is_empty() {
            self.e.line("scf.yield");
        } else {
            self.e.line(&format!("scf.yield {} : {tys}", names.join(", ")));
        }
        self.e.pop();
    }

    /// Lowers `cond`, `while` or `scan`; `outs` are the equation's output variables.
    pub(crate) fn control(&mut self, p: &Primitive, ins: &[Val], outs: &[Var]) -> Result<Vec<Val>, Error> {
        let out_avals: Vec<ShapedArray> = outs.iter().map(|v| v.aval.strong()).collect();
        match p {
            Primitive::Cond { branches } => self.cond(branches, ins, &out_avals),
            Primitive::While { cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts } => {
                self.e.loop_depth += 1;
                let r = self.while_(cond_jaxpr, body_jaxpr, *cond_nconsts, *body_nconsts, ins, &out_avals);
                self.e.loop_depth -= 1;
                r
            }
            Primitive::Scan { jaxpr, length, reverse, num_consts, num_carry, .. } => {
                self.e.loop_depth += 1;
                let r = self.scan(jaxpr, *length, *reverse, *num_consts, *num_carry, ins, &out_avals);
                self.e.loop_depth -= 1;
                r
            }
            _ => Err(malformed(format!("`{}` is not control flow", p.name()))),
        }
    }

    fn cond(&mut self, branches: &[Jaxpr], ins: &[Val], out_avals: &[ShapedArray]) -> Result<Vec<Val>, Error> {
        let i = self.scalar_of(&ins[0]);
        let ix = self.e.op(&format!("arith.index_cast {i} : i32 to index"));
        let args = &ins[1..];
        let n = self.e.fresh("");
        let k = out_avals.len();
        let cases: Vec<String> = (0..branches.len() - 1).map(|c| c.to_string()).collect();
        let arrow = if k == 0 { String::new() } else { format!(" -> {}", tys(out_avals)) };
        self.e.line(&format!("{}scf.index_switch {ix}{arrow}", head(&n, k)));
        for (b, j) in branches.iter().enumerate() {
            let label = if b + 1 == branches.len() { "default".to_string() } else { format!("case {}", cases[b]) };
            self.e.line(&format!("{label} {{"));
            let r = self.region(j, args.to_vec())?;
            self.yield_(&r, out_avals);
            self.e.line("}");
        }
        Ok(results(&n, k).into_iter().zip(out_avals).map(|(r, a)| carry_val(r, a)).collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn while_(
        &mut self,
        cj: &Jaxpr,
        bj: &Jaxpr,
        cn: usize,
        bn: usize,
        ins: &[Val],
        out_avals: &[ShapedArray],
    ) -> Result<Vec<Val>, Error> {
        let (cconsts, rest) = ins.split_at(cn);
        let (bconsts, init) = rest.split_at(bn);
        let init_t: Vec<String> = init.iter().map(|v| self.carry(v)).collect();
        let n = self.e.fresh("");
        let k = out_avals.len();
        let w: Vec<String> = (0..k).map(|_| self.e.fresh("w")).collect();
        let binds: Vec<String> = w.iter().zip(&init_t).map(|(a, b)| format!("{a} = {b}")).collect();
        let t = tys(out_avals);
        self.e.line(&format!("{}scf.while ({}) : ({t}) -> ({t}) {{", head(&n, k), binds.join(", ")));
        let mut cargs: Vec<Val> = cconsts.to_vec();
        cargs.extend(w.iter().zip(out_avals).map(|(n, a)| carry_val(n.clone(), a)));
        let pred = self.region(cj, cargs)?;
        self.e.push();
        self.e.line(&format!("scf.condition({}) {} : {t}", pred[0], w.join(", ")));
        self.e.pop();
        self.e.line("} do {");
        let d: Vec<String> = (0..k).map(|_| self.e.fresh("d")).collect();
        let sig: Vec<String> = d.iter().zip(out_avals).map(|(n, a)| format!("{n}: {}", carry_ty(a))).collect();
        self.e.line(&format!("^bb0({}):", sig.join(", ")));
        let mut bargs: Vec<Val> = bconsts.to_vec();
        bargs.extend(d.iter().zip(out_avals).map(|(n, a)| carry_val(n.clone(), a)));
        let r = self.region(bj, bargs)?;
        self.yield_(&r, out_avals);
        self.e.line("}");
        Ok(results(&n, k).into_iter().zip(out_avals).map(|(r, a)| carry_val(r, a)).collect())
    }

    #[allow(clippy::too_many_arguments)]
    fn scan(
        &mut self,
        j: &Jaxpr,
        length: usize,
        reverse: bool,
        nconsts: usize,
        ncarry: usize,
        ins: &[Val],
        out_avals: &[ShapedArray],
    ) -> Result<Vec<Val>, Error> {
        let (consts, rest) = ins.split_at(nconsts);
        let (init, xs) = rest.split_at(ncarry);
        let mut inits: Vec<String> = init.iter().map(|v| self.carry(v)).collect();
        for a in &out_avals[ncarry..] {
            let e = self.empty(a);
            inits.push(e);
        }
        let xs_t: Vec<(String, ShapedArray)> = xs.iter().map(|v| (self.tensor(v), v.aval().strong())).collect();
        let c0 = self.e.op("arith.constant 0 : index");
        let c1 = self.e.op("arith.constant 1 : index");
        let cn = self.e.op(&format!("arith.constant {length} : index"));
        let last = self.e.op(&format!("arith.constant {} : index", length.saturating_sub(1)));
        let n = self.e.fresh("");
        let k = out_avals.len();
        let iv = self.e.fresh("iv");
        let acc: Vec<String> = (0..k).map(|_| self.e.fresh("acc")).collect();
        let binds: Vec<String> = acc.iter().zip(&inits).map(|(a, b)| format!("{a} = {b}")).collect();
        // The stacked outputs are tensors even when their slices are 0-d.
        let all_tys: Vec<String> = out_avals.iter().enumerate().map(|(i, a)| if i < ncarry { carry_ty(a) } else { a.mlir_tensor() }).collect();
        let all_tys = all_tys.join(", ");
        let iter = if k == 0 { String::new() } else { format!(" iter_args({}) -> ({all_tys})", binds.join(", ")) };
        self.e.line(&format!("{}scf.for {iv} = {c0} to {cn} step {c1}{iter} {{", head(&n, k)));
        self.e.push();
        let idx = if reverse { self.e.op(&format!("arith.subi {last}, {iv} : index")) } else { iv.clone() };
        let mut args: Vec<Val> = consts.to_vec();
        args.extend(acc[..ncarry].iter().zip(&out_avals[..ncarry]).map(|(n, a)| carry_val(n.clone(), a)));
        for (x, a) in &xs_t {
            let mut s = a.clone();
            s.shape.remove(0);
            if s.ndim() == 0 {
                let v = self.e.op(&format!("tensor.extract {x}[{idx}] : {}", a.mlir_tensor()));
                args.push(Val::S(v, s));
                continue;
            }
            let (offs, sizes, strides) = slice_spec(&idx, &s.shape);
            let v = self.e.op(&format!(
                "tensor.extract_slice {x}[{offs}] [{sizes}] [{strides}] : {} to {}",
                a.mlir_tensor(),
                s.mlir_tensor()
            ));
            args.push(Val::T(v, s));
        }
        self.e.pop();
        let r = self.region(j, args)?;
        self.e.push();
        let mut next: Vec<String> = r[..ncarry].to_vec();
        for (y, (accn, a)) in r[ncarry..].iter().zip(acc[ncarry..].iter().zip(&out_avals[ncarry..])) {
            let mut s = a.clone();
            s.shape.remove(0);
            if s.ndim() == 0 {
                // `region` handed the 0-d `y` over as a scalar.
                next.push(self.e.op(&format!("tensor.insert {y} into {accn}[{idx}] : {}", a.mlir_tensor())));
                continue;
            }
            let (offs, sizes, strides) = slice_spec(&idx, &s.shape);
            let v = self.e.op(&format!(
                "tensor.insert_slice {y} into {accn}[{offs}] [{sizes}] [{strides}] : {} into {}",
                s.mlir_tensor(),
                a.mlir_tensor()
            ));
            next.push(v);
        }
        self.e.pop();
        self.yield_tys(&next, &all_tys);
        self.e.line("}");
        Ok(results(&n, k)
            .into_iter()
            .zip(out_avals)
            .enumerate()
            .map(|(i, (r, a))| if i < ncarry { carry_val(r, a) } else { Val::T(r, a.clone()) })
            .collect())
    }
}

/// Offsets, sizes and strides of the slice `[idx, :, ...]` of a stacked tensor whose
/// slices have shape `inner`.
fn slice_spec(idx: &str, inner: &[usize]) -> (String, String, String) {
    let mut offs = vec![idx.to_string()];
    let mut sizes = vec!["1".to_string()];
    let mut strides = vec!["1".to_string()];
    for d in inner {
        offs.push("0".into());
        sizes.push(d.to_string());
        strides.push("1".into());
    }
    (offs.join(", "), sizes.join(", "), strides.join(", "))
}
