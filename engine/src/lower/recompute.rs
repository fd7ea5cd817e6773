//! Recomputing cheap elementwise producers per consumer instead of materialising them.
//!
//! `linalg-fuse-elementwise-ops` fuses a producer into its consumer only when the producer
//! has a single use. A value read by two loop nests (softmax's `e = exp(x - max)`, read by
//! `sum(e)` and by `e / sum`) is therefore written to memory once and read back twice. For
//! large arrays that traffic costs more than computing `e` again: with one copy of the
//! producer chain per consumer, every copy fuses into its consumer, and softmax reads `x`
//! three times and writes its result once instead of also writing and re-reading `e`.
//!
//! [`recompute_producers`] rewrites a jaxpr's equations so: walking from the last equation
//! backwards, an equation whose output is large, cheap to recompute (see [`cheap`]), read
//! by two to [`MAX_CONSUMERS`] distinct equations that all lower to fusable loop nests
//! (elementwise, broadcasts, conversions, reductions), and not a jaxpr output, is cloned
//! once per extra consumer (fresh output variables). Its inputs then have more uses, so the
//! producers feeding it are cloned in turn, up to the first non-elementwise value (a
//! reduction result, an argument). At most [`MAX_CLONES`] equations are added per jaxpr.
//! Results are bit-identical: the clones compute the same ops on the same values.

use crate::ir::{Atom, DType, Eqn, Primitive, Var};
use std::collections::HashMap;

/// Outputs with fewer elements than this are left materialised (they stay in cache, and
/// small modules keep their IR).
pub const RECOMPUTE_MIN_ELEMS: usize = 1 << 14;
/// Values read by more equations than this are materialised.
pub const MAX_CONSUMERS: usize = 3;
/// At most this many equations are added to one jaxpr.
pub const MAX_CLONES: usize = 32;

/// False when the environment variable `JAXREPL_RECOMPUTE` is `0` (read once per process;
/// for measuring what recomputation gains).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("JAXREPL_RECOMPUTE").map_or(true, |v| v != "0"))
}

/// Whether `e` is cheap to recompute: a broadcast, a conversion, or an elementwise op that
/// lowers to a few vectorised instructions (transcendentals only in f32/f16/bf16, which use
/// the inline approximations of `lower::approx`; f64 ones call libm).
fn cheap(e: &Eqn) -> bool {
    use Primitive::*;
    let [o] = e.outputs.as_slice() else { return false };
    let f64_out = o.aval.dtype == DType::F64;
    match &e.primitive {
        BroadcastInDim { .. } | ConvertElementType { .. } => true,
        Exp | Log | Tanh => !f64_out,
        Neg | Abs | Sqrt | Not => true,
        Add | AddAny | Sub | Mul | Div | Max | Min | And | Or | Eq | Ne | Lt | Le | Gt | Ge | Xor => true,
        _ => false,
    }
}

/// Whether `e` lowers to a loop nest that `linalg-fuse-elementwise-ops` can fuse a
/// producer into.
fn fusable_consumer(e: &Eqn) -> bool {
    use Primitive::*;
    cheap(e) || e.primitive.is_unary_elementwise() || e.primitive.is_binary_elementwise() || matches!(e.primitive, ReduceSum { .. } | ReduceMax { .. } | ReduceMin { .. } | SelectN)
}

/// `eqns` (with jaxpr outputs `outvars` and every variable id below `next_id`) with cheap
/// multi-consumer producers cloned per consumer, as described in the module docs; `None`
/// when nothing changes.
pub(crate) fn recompute_producers(eqns: &[Eqn], outvars: &[Atom], mut next_id: u32) -> Option<Vec<Eqn>> {
    if !enabled() {
        return None;
    }
    // Consumers of each variable: equation indices (distinct, ascending) and whether a
    // jaxpr output reads it.
    let mut consumers: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, e) in eqns.iter().enumerate() {
        for a in &e.inputs {
            if let Atom::Var(v) = a {
                let c = consumers.entry(v.id).or_default();
                if c.last() != Some(&i) {
                    c.push(i);
                }
            }
        }
    }
    let outs: Vec<u32> = outvars.iter().filter_map(|a| if let Atom::Var(v) = a { Some(v.id) } else { None }).collect();
    // Clones to insert right after equation i (in order), and the rewritten equations.
    let mut eqns: Vec<Eqn> = eqns.to_vec();
    let mut added: Vec<Vec<Eqn>> = vec![vec![]; eqns.len()];
    let mut clones = 0;
    for i in (0..eqns.len()).rev() {
        let e = &eqns[i];
        let Some(o) = e.outputs.first() else { continue };
        if !cheap(e) || o.aval.size() < RECOMPUTE_MIN_ELEMS || outs.contains(&o.id) {
            continue;
        }
        let users = consumers.get(&o.id).cloned().unwrap_or_default();
        if users.len() < 2 || users.len() > MAX_CONSUMERS || clones + users.len() - 1 > MAX_CLONES {
            continue;
        }
        // The consumer of a clone may itself be a clone added after an earlier equation;
        // locate each user's equation (original or clone) by its index in `eqns`/`added`.
        if !users.iter().all(|&u| fusable_consumer(user(&eqns, &added, u))) {
            continue;
        }
        let (oid, proto) = (o.id, e.clone());
        for &u in &users[1..] {
            let fresh = Var { id: next_id, aval: proto.outputs[0].aval.clone() };
            next_id += 1;
            let mut c = proto.clone();
            c.outputs = vec![fresh.clone()];
            rename(user_mut(&mut eqns, &mut added, u), oid, &fresh);
            for a in &c.inputs {
                if let Atom::Var(v) = a {
                    consumers.entry(v.id).or_default().push(CLONE_BASE + clones);
                }
            }
            added[i].push(c);
            clones += 1;
        }
    }
    if clones == 0 {
        return None;
    }
    Some(eqns.into_iter().zip(added).flat_map(|(e, a)| std::iter::once(e).chain(a)).collect())
}

/// Consumer indices at or above this name the clones (`CLONE_BASE + k`: the k-th clone
/// added, in the order of `added`'s flattening by insertion).
const CLONE_BASE: usize = usize::MAX / 2;

/// The equation a consumer index names: an original equation, or the k-th clone.
fn user<'a>(eqns: &'a [Eqn], added: &'a [Vec<Eqn>], u: usize) -> &'a Eqn {
    if u < CLONE_BASE {
        &eqns[u]
    } else {
        clone_at(added, u - CLONE_BASE)
    }
}

fn user_mut<'a>(eqns: &'a mut [Eqn], added: &'a mut [Vec<Eqn>], u: usize) -> &'a mut Eqn {
    if u < CLONE_BASE {
        &mut eqns[u]
    } else {
        clone_at_mut(added, u - CLONE_BASE)
    }
}

/// The k-th clone in creation order. Clones are created walking backwards, each pushed to
/// its producer's list; creation order k is recovered from a per-clone tag kept in the
/// list position: lists are filled in decreasing producer index, so count from the end.
fn clone_at(added: &[Vec<Eqn>], k: usize) -> &Eqn {
    let (i, j) = locate(added, k);
    &added[i][j]
}

fn clone_at_mut(added: &mut [Vec<Eqn>], k: usize) -> &mut Eqn {
    let (i, j) = locate(added, k);
    &mut added[i][j]
}

/// Position of the k-th created clone: producers are visited from the last equation
/// backwards and each pushes all its clones at once, so creation order is the lists from
/// the highest index down, each front to back.
fn locate(added: &[Vec<Eqn>], k: usize) -> (usize, usize) {
    let mut n = 0;
    for i in (0..added.len()).rev() {
        if k < n + added[i].len() {
            return (i, k - n);
        }
        n += added[i].len();
    }
    unreachable!("clone {k} was created")
}

/// Replaces the reads of variable `old` in `e` by `new`.
fn rename(e: &mut Eqn, old: u32, new: &Var) {
    for a in &mut e.inputs {
        if matches!(a, Atom::Var(v) if v.id == old) {
            *a = Atom::Var(new.clone());
        }
    }
}
