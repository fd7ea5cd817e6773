//! `jnp.einsum(spec, operands)`: the spec is parsed (`"ij,jk->ik"`, implicit output
//! when `->` is absent: labels used once, in alphabetical order) and the operands are
//! contracted pairwise, left to right, each step one `dot_general` (shared labels still
//! needed later are batch dims, the others contracted) followed by a `transpose`.
//! Labels of one operand that appear nowhere else are summed first (`reduce_sum`).
//! Errors (`ValueError`, naming the spec and shapes): malformed specs, a label repeated
//! within one operand (diagonals are not supported), sizes that disagree.

use crate::error::{Error, Result};
use crate::ir::Primitive;
use crate::lax::{self, py_shape};
use crate::trace::{Array, Operand};

fn err(spec: &str, xs: &[Array], msg: &str) -> Error {
    let shapes: Vec<String> = xs.iter().map(|x| py_shape(&x.shape())).collect();
    Error::value_error(format!("einsum {spec:?} with shapes {}: {msg}", shapes.join(", ")))
}

/// Sums away the labels of `x` not in `keep`.
fn sum_unused(x: Array, labels: Vec<char>, keep: &[char]) -> Result<(Array, Vec<char>)> {
    let axes: Vec<usize> = (0..labels.len()).filter(|&i| !keep.contains(&labels[i])).collect();
    if axes.is_empty() {
        return Ok((x, labels));
    }
    let r = lax::bind1(Primitive::ReduceSum { axes: axes.clone() }, vec![Operand::Array(x)])?;
    Ok((r, labels.into_iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, c)| c).collect()))
}

/// `jnp.einsum(spec, xs)`.
#[track_caller]
pub fn einsum(spec: &str, xs: &[Array]) -> Result<Array> {
    einsum_with(spec, xs, None::<crate::ir::DotPrecision>)
}

/// `jnp.einsum(spec, xs, precision=...)`: every contraction gets `precision` (see
/// `lax::dot_general_with`).
#[track_caller]
pub fn einsum_with(spec: &str, xs: &[Array], precision: impl crate::ir::IntoPrecision) -> Result<Array> {
    let precision = precision.into_precision()?;
    let s: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match s.split_once("->") {
        Some((l, o)) => (l.to_string(), Some(o.to_string())),
        None => (s.clone(), None),
    };
    let ins: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    if ins.len() != xs.len() {
        return Err(err(spec, xs, &format!("{} operand specs for {} operands", ins.len(), xs.len())));
    }
    let mut size = std::collections::HashMap::new();
    for (l, x) in ins.iter().zip(xs) {
        if l.len() != x.ndim() || l.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(err(spec, xs, "each operand needs one letter per dimension"));
        }
        for (i, &c) in l.iter().enumerate() {
            if l.iter().filter(|&&d| d == c).count() > 1 {
                return Err(err(spec, xs, &format!("label {c:?} repeats within one operand (diagonals are not supported)")));
            }
            if *size.entry(c).or_insert(x.shape()[i]) != x.shape()[i] {
                return Err(err(spec, xs, &format!("label {c:?} has sizes {} and {}", size[&c], x.shape()[i])));
            }
        }
    }
    let out: Vec<char> = match out {
        Some(o) => o.chars().collect(),
        None => {
            let mut v: Vec<char> = size.keys().copied().filter(|c| ins.iter().flatten().filter(|&d| d == c).count() == 1).collect();
            v.sort();
            v
        }
    };
    if out.iter().any(|c| !size.contains_key(c)) {
        return Err(err(spec, xs, "the output has a label no operand has"));
    }
    let needed = |from: usize| -> Vec<char> {
        let mut k = out.clone();
        for l in &ins[from..] {
            k.extend(l);
        }
        k
    };
    let (mut acc, mut al) = sum_unused(xs[0].clone(), ins[0].clone(), &needed(1))?;
    for i in 1..xs.len() {
        let later = needed(i + 1);
        let (b, bl) = sum_unused(xs[i].clone(), ins[i].clone(), &{
            let mut k = later.clone();
            k.extend(&al);
            k
        })?;
        let (acc2, bl2) = sum_unused(acc, al, &{
            let mut k = later.clone();
            k.extend(&bl);
            k
        })?;
        let shared: Vec<char> = acc2_labels(&bl2, &bl);
        let batch: Vec<char> = shared.iter().copied().filter(|c| later.contains(c)).collect();
        let contract: Vec<char> = shared.iter().copied().filter(|c| !later.contains(c)).collect();
        let pos = |ls: &[char], c: &char| ls.iter().position(|d| d == c).unwrap();
        let (lb, rb): (Vec<usize>, Vec<usize>) = batch.iter().map(|c| (pos(&bl2, c), pos(&bl, c))).unzip();
        let (lc, rc): (Vec<usize>, Vec<usize>) = contract.iter().map(|c| (pos(&bl2, c), pos(&bl, c))).unzip();
        let r = lax::dot_general_with(&acc2, &b, (&lc, &rc), (&lb, &rb), precision, None)?;
        let mut nl = batch.clone();
        nl.extend(bl2.iter().filter(|c| !shared.contains(c)));
        nl.extend(bl.iter().filter(|c| !shared.contains(c)));
        acc = r;
        al = nl;
    }
    let (acc, al) = sum_unused(acc, al, &out)?;
    let perm: Vec<usize> = out.iter().map(|c| al.iter().position(|d| d == c).unwrap()).collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(acc);
    }
    lax::transpose(&acc, &perm)
}

fn acc2_labels(a: &[char], b: &[char]) -> Vec<char> {
    a.iter().copied().filter(|c| b.contains(c)).collect()
}
