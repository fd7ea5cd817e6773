//! Prints jaxprs in JAX's text format (`jax.make_jaxpr`), byte for byte where JAX is
//! deterministic: variables named `a, b, …, z, ba, bb, …` in order of appearance, unused
//! equation outputs as `_`, literals as `2.0:f32[]`, params sorted and inline when the
//! equation fits in 80 columns, otherwise one per line.

use super::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, Var};
use std::collections::{HashMap, HashSet};
use std::fmt;

const WIDTH: usize = 80;

/// JAX's variable name for the n-th variable: a..z, ba..bz, ca..
pub fn var_name(mut n: usize) -> String {
    let mut s = Vec::new();
    loop {
        s.push((b'a' + (n % 26) as u8) as char);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    s.iter().rev().collect()
}

struct Namer {
    names: HashMap<u32, String>,
    next: usize,
    used: HashSet<u32>,
}

impl Namer {
    fn bind(&mut self, v: &Var) -> String {
        if !self.used.contains(&v.id) {
            return "_".into();
        }
        let n = var_name(self.next);
        self.next += 1;
        self.names.insert(v.id, n.clone());
        n
    }
    fn bind_always(&mut self, v: &Var) -> String {
        let n = var_name(self.next);
        self.next += 1;
        self.names.insert(v.id, n.clone());
        n
    }
    fn atom(&self, a: &Atom) -> String {
        match a {
            Atom::Var(v) => self.names.get(&v.id).cloned().unwrap_or_else(|| format!("?{}", v.id)),
            // u32 literals are held as i32 bit patterns: print them unsigned, as JAX does.
            Atom::Lit(l) if l.aval.dtype == crate::ir::DType::U32 => format!("{}:{}", l.value.as_i64() as u32, l.aval.short()),
            Atom::Lit(l) => format!("{}:{}", l.value.jaxpr_text(), l.aval.short()),
        }
    }
}

fn collect_used(j: &Jaxpr, used: &mut HashSet<u32>) {
    for e in &j.eqns {
        for a in &e.inputs {
            if let Atom::Var(v) = a {
                used.insert(v.id);
            }
        }

    }
    for a in &j.outvars {
        if let Atom::Var(v) = a {
            used.insert(v.id);
        }
    }
}

/// Python tuple repr of integers: `()`, `(0,)`, `(0, 1)`.
pub fn py_tuple(xs: &[usize]) -> String {
    match xs.len() {
        0 => "()".into(),
        1 => format!("({},)", xs[0]),
        _ => format!("({})", xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

fn py_list(xs: &[usize]) -> String {
    format!("[{}]", xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}

/// Params of a primitive as `(name, value)` pairs, sorted by name as JAX prints them.
/// Sub-jaxprs are returned separately by `sub_jaxprs`.
pub fn params(p: &Primitive) -> Vec<(String, String)> {
    use Primitive::*;
    let mut v: Vec<(String, String)> = match p {
        ConvertElementType { new_dtype, weak_type } => vec![
            ("new_dtype".into(), new_dtype.name().into()),
            ("weak_type".into(), if *weak_type { "True" } else { "False" }.into()),
        ],
        BroadcastInDim { shape, broadcast_dimensions } => vec![
            ("broadcast_dimensions".into(), py_tuple(broadcast_dimensions)),
            ("shape".into(), py_tuple(shape)),
            ("sharding".into(), "None".into()),
        ],
        Reshape { new_sizes } => vec![
            ("dimensions".into(), "None".into()),
            ("new_sizes".into(), py_tuple(new_sizes)),
            ("sharding".into(), "None".into()),
        ],
        Transpose { permutation } => vec![("permutation".into(), py_tuple(permutation))],
        Iota { dtype, shape, dimension } => vec![
            ("dimension".into(), dimension.to_string()),
            ("dtype".into(), dtype.name().into()),
            ("shape".into(), py_tuple(shape)),
            ("sharding".into(), "None".into()),
        ],
        ReduceSum { axes } | ReduceMax { axes } | ReduceMin { axes } => {
            vec![("axes".into(), py_tuple(axes)), ("out_sharding".into(), "None".into())]
        }
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, preferred_element_type } => vec![
            (
                "dimension_numbers".into(),
                format!(
                    "(({}, {}), ({}, {}))",
                    py_list(lhs_contracting),
                    py_list(rhs_contracting),
                    py_list(lhs_batch),
                    py_list(rhs_batch)
                ),
            ),
            ("precision".into(), "None".into()),
            (
                "preferred_element_type".into(),
                preferred_element_type.map(|d| d.name().to_string()).unwrap_or("None".into()),
            ),
        ],
        DebugCallback { fmt, .. } => vec![
            ("callback".into(), format!("<debug print {fmt:?}>")),
            ("effect".into(), "Debug".into()),
        ],
        Pjit { name, .. } => vec![("name".into(), name.clone())],
        While { cond_nconsts, body_nconsts, .. } => vec![
            ("body_nconsts".into(), body_nconsts.to_string()),
            ("cond_nconsts".into(), cond_nconsts.to_string()),
        ],
        CustomJvpCall { name, rule, num_consts, .. } => vec![
            ("jvp_jaxpr_fun".into(), format!("<rule {rule} of {name}>")),
            ("num_consts".into(), num_consts.to_string()),
            ("symbolic_zeros".into(), "False".into()),
        ],
        CustomVjpCall { name, rule, num_consts, .. } => vec![
            ("bwd".into(), format!("<bwd {rule} of {name}>")),
            ("fwd_jaxpr_thunk".into(), format!("<fwd {rule} of {name}>")),
            ("num_consts".into(), num_consts.to_string()),
            ("symbolic_zeros".into(), "False".into()),
        ],
        Checkpoint { policy, .. } => vec![
            ("differentiated".into(), "False".into()),
            ("policy".into(), policy.name().into()),
            ("prevent_cse".into(), "True".into()),
        ],
        Scan { length, reverse, unroll, .. } => vec![
            ("length".into(), length.to_string()),
            ("reverse".into(), if *reverse { "True" } else { "False" }.into()),
            ("unroll".into(), unroll.to_string()),
        ],
        _ => super::pretty_ops::params(p),
    };
    v.sort();
    v
}

struct Printer {
    namer: Namer,
    out: String,
}

impl Printer {
    /// Prints `j` with its first line continuing the current line and later lines at `indent`.
    /// Prints `j` in its own naming scope (sub-jaxprs reuse variable ids of their own;
    /// the name counter continues across scopes, as in JAX).
    fn jaxpr(&mut self, j: &Jaxpr, indent: usize) {
        let mut used = HashSet::new();
        collect_used(j, &mut used);
        let saved_used = std::mem::replace(&mut self.namer.used, used);
        let saved_names = self.namer.names.clone();
        self.jaxpr_scoped(j, indent);
        self.namer.used = saved_used;
        self.namer.names = saved_names;
    }

    fn jaxpr_scoped(&mut self, j: &Jaxpr, indent: usize) {
        let consts: Vec<String> =
            j.constvars.iter().map(|v| format!("{}:{}", self.namer.bind_always(v), v.aval.short())).collect();
        let ins: Vec<String> =
            j.invars.iter().map(|v| format!("{}:{}", self.namer.bind_always(v), v.aval.short())).collect();
        let head = format!(
            "{{ lambda {}; {}. let",
            if consts.is_empty() { String::new() } else { consts.join(" ") + " " },
            ins.join(" ")
        );
        let mut body = Vec::new();
        for e in &j.eqns {
            body.push(self.eqn(e, indent + 4));
        }
        let outs: Vec<String> = j.outvars.iter().map(|a| self.namer.atom(a)).collect();
        let outs = if outs.len() == 1 { format!("({},)", outs[0]) } else { format!("({})", outs.join(", ")) };
        if body.is_empty() {
            self.out.push_str(&format!("{head}  in {outs} }}"));
            return;
        }
        // A one-equation sub-jaxpr fits on one line, as JAX prints short branches.
        if body.len() == 1 && !body[0].contains('\n') {
            let one = format!("{head} {} in {outs} }}", body[0]);
            if indent + one.len() <= WIDTH {
                self.out.push_str(&one);
                return;
            }
        }
        self.out.push_str(&head);
        for b in body {
            self.out.push('\n');
            self.out.push_str(&" ".repeat(indent + 4));
            self.out.push_str(&b);
        }
        self.out.push('\n');
        self.out.push_str(&" ".repeat(indent + 2));
        self.out.push_str(&format!("in {outs} }}"));
    }

    /// One equation's text (first line without indentation; later lines indented).
    fn eqn(&mut self, e: &Eqn, indent: usize) -> String {
        let outs: Vec<String> =
            e.outputs.iter().map(|v| format!("{}:{}", self.namer.bind(v), v.aval.short())).collect();
        let ins: Vec<String> = e.inputs.iter().map(|a| self.namer.atom(a)).collect();
        let mut ps: Vec<(String, String)> = params(&e.primitive);
        let subs = e.primitive.sub_jaxprs();
        if !subs.is_empty() {
            let render = |p: &mut Printer, j: &Jaxpr, at: usize| -> String {
                let saved = std::mem::take(&mut p.out);
                p.jaxpr(j, at);
                std::mem::replace(&mut p.out, saved)
            };
            match &e.primitive {
                Primitive::Cond { branches } => {
                    let mut v = String::from("(");
                    for b in branches {
                        let t = render(self, b, indent + 4);
                        v.push('\n');
                        v.push_str(&" ".repeat(indent + 4));
                        v.push_str(&t);
                    }
                    v.push('\n');
                    v.push_str(&" ".repeat(indent + 2));
                    v.push(')');
                    ps.push(("branches".into(), v));
                }
                Primitive::While { cond_jaxpr, body_jaxpr, .. } => {
                    let b = render(self, body_jaxpr, indent + 2);
                    let c = render(self, cond_jaxpr, indent + 2);
                    ps.push(("body_jaxpr".into(), b));
                    ps.push(("cond_jaxpr".into(), c));
                }
                Primitive::CustomJvpCall { .. } | Primitive::CustomVjpCall { .. } => {
                    let t = render(self, subs[0], indent + 2);
                    ps.push(("call_jaxpr".into(), t));
                }
                _ => {
                    let t = render(self, subs[0], indent + 2);
                    ps.push(("jaxpr".into(), t));
                }
            }
            ps.sort();
        }
        let lhs = if outs.is_empty() { String::new() } else { format!("{} = ", outs.join(" ")) };
        let name = e.primitive.name();
        let args = if ins.is_empty() { String::new() } else { format!(" {}", ins.join(" ")) };
        if ps.is_empty() {
            return format!("{lhs}{name}{args}");
        }
        let inline = format!(
            "{lhs}{name}[{}]{args}",
            ps.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
        if indent + inline.len() <= WIDTH && !inline.contains('\n') {
            return inline;
        }
        let mut s = format!("{lhs}{name}[");
        for (k, v) in &ps {
            s.push('\n');
            s.push_str(&" ".repeat(indent + 2));
            s.push_str(&format!("{k}={v}"));
        }
        s.push('\n');
        s.push_str(&" ".repeat(indent));
        s.push_str(&format!("]{args}"));
        s
    }
}

/// Prints a jaxpr as JAX does.
pub fn print_jaxpr(j: &Jaxpr) -> String {
    let mut p = Printer { namer: Namer { names: HashMap::new(), next: 0, used: HashSet::new() }, out: String::new() };
    p.jaxpr(j, 0);
    p.out
}

impl fmt::Display for Jaxpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_jaxpr(self))
    }
}

impl fmt::Display for ClosedJaxpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_jaxpr(&self.jaxpr))
    }
}
