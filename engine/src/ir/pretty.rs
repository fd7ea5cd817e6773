//! Prints jaxprs in JAX's text format (`jax.make_jaxpr`), byte for byte where JAX is
//! deterministic: variables named `a, b, …, z, ba, bb, …` in order of appearance, unused
//! equation outputs of the top-level jaxpr as `_` (sub-jaxprs name every variable, as
//! JAX's `_dropvars` only looks at the top level), literals as `2.0:f32[]`, params sorted
//! and inline when the equation fits in 80 columns, otherwise one per line. Sub-jaxprs
//! of more than 10 equations are printed once before the top-level jaxpr as
//! `let name = { .. } in` and referred to by name (JAX 0.10's `pp_toplevel_jaxpr`).

use super::aval::ShapedArray;
use super::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Primitive, Var};
use std::collections::{HashMap, HashSet, VecDeque};
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
    /// The variables read in the top-level jaxpr; `None` inside sub-jaxprs (no `_` there).
    used: Option<HashSet<u32>>,
}

impl Namer {
    fn bind(&mut self, v: &Var) -> String {
        if self.used.as_ref().is_some_and(|u| !u.contains(&v.id)) {
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
        // JAX's pp rule shows only non-trivial broadcast_dimensions (the shape is the binder's).
        BroadcastInDim { broadcast_dimensions, .. } if broadcast_dimensions.is_empty() => vec![],
        BroadcastInDim { broadcast_dimensions, .. } => vec![("broadcast_dimensions".into(), py_tuple(broadcast_dimensions))],
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
        DotGeneral { lhs_contracting, rhs_contracting, lhs_batch, rhs_batch, precision, preferred_element_type, out_sharding } => {
            let mut params = vec![
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
            ("precision".into(), precision.map(|p| p.jaxpr_text()).unwrap_or("None".into())),
            (
                "preferred_element_type".into(),
                preferred_element_type.map(|d| d.name().to_string()).unwrap_or("None".into()),
            ),
            ];
            // Shown only when given (`jnp.dot(.., out_sharding=P(..))`), after the dimension numbers as JAX orders it.
            if let Some(s) = out_sharding {
                params.insert(1, ("out_sharding".into(), format!("{s:?}")));
            }
            params
        }
        DebugCallback { fmt, .. } => vec![
            ("callback".into(), if fmt.is_empty() { "<debug callback>".to_string() } else { format!("<debug print {fmt:?}>") }),
            ("effect".into(), "Debug".into()),
        ],
        PureCallback { name, result_avals, vmap_method, .. } => vec![
            ("callback".into(), callback_text(name)),
            ("result_avals".into(), result_avals_text(result_avals)),
            ("sharding".into(), "None".into()),
            ("vmap_method".into(), vmap_method.map_or("None", |m| m.name()).into()),
        ],
        IoCallback { name, result_avals, ordered, .. } => vec![
            ("callback".into(), callback_text(name)),
            ("ordered".into(), if *ordered { "True" } else { "False" }.into()),
            ("result_avals".into(), result_avals_text(result_avals)),
            ("sharding".into(), "None".into()),
        ],
        Pjit { name, .. } => vec![("name".into(), name.clone())],
        Collective(c) => c.params(),
        ShardMap(p) => p.params(),
        While { cond_nconsts, body_nconsts, .. } => vec![
            ("body_nconsts".into(), body_nconsts.to_string()),
            ("cond_nconsts".into(), cond_nconsts.to_string()),
        ],
        // JAX's pp rules: the rules' function names, num_consts only when nonzero (`name`
        // goes first, see `eqn`). Our rules are closures, which have no names: `<closure>`
        // (as JAX prints `<lambda>`).
        CustomJvpCall { num_consts, .. } => {
            let mut v = vec![("jvp".into(), "<closure>".into()), ("symbolic_zeros".into(), "False".into())];
            if *num_consts > 0 {
                v.push(("num_consts".into(), num_consts.to_string()));
            }
            v
        }
        CustomVjpCall { num_consts, .. } => {
            let mut v = vec![
                ("bwd".into(), "<closure>".into()),
                ("fwd".into(), "<closure>".into()),
                ("symbolic_zeros".into(), "False".into()),
            ];
            if *num_consts > 0 {
                v.push(("num_consts".into(), num_consts.to_string()));
            }
            v
        }
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

/// A host callback's name as JAX shows its function: `<function host_sin>`, or
/// `<closure>` for a Rust closure (which has no name).
fn callback_text(name: &str) -> String {
    if name == "<closure>" { name.to_string() } else { format!("<function {name}>") }
}

/// `(ShapedArray(float32[5]),)`: a Python tuple of the result avals' reprs.
fn result_avals_text(avals: &[ShapedArray]) -> String {
    let items: Vec<String> = avals.iter().map(|a| format!("ShapedArray({})", a.long())).collect();
    if items.len() == 1 { format!("({},)", items[0]) } else { format!("({})", items.join(", ")) }
}

struct Printer {
    namer: Namer,
    out: String,
    /// Sub-jaxprs printed once at the top, by address, with their names.
    shared: HashMap<*const Jaxpr, String>,
    /// Types carrying a sharding or memory space (`f32[8@x]`, `f32<host>[8]`), by (jaxpr
    /// address, var id) (`sharding_types::var_types`); empty for untyped jaxprs.
    types: HashMap<(usize, u32), String>,
    /// The jaxprs being printed, innermost last (whose variables `ty` looks up).
    cur: Vec<usize>,
}

/// The equation's `name` param, which JAX names an outlined sub-jaxpr after.
fn eqn_name(p: &Primitive) -> Option<&str> {
    match p {
        Primitive::Pjit { name, .. } | Primitive::CustomJvpCall { name, .. } | Primitive::CustomVjpCall { name, .. } => Some(name),
        _ => None,
    }
}

/// The sub-jaxprs JAX prints once before the top-level jaxpr (those of more than 10
/// equations), in breadth-first order, named after the equation's `name` param (without
/// `<>`) or `jaxpr`, with `1`, `2`, .. appended to repeated names.
fn shared_jaxprs(top: &Jaxpr) -> Vec<(&Jaxpr, String)> {
    let mut out = vec![];
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut queue: VecDeque<(&Jaxpr, Option<&str>)> = VecDeque::from([(top, None)]);
    while let Some((j, name)) = queue.pop_front() {
        if !std::ptr::eq(j, top) && j.eqns.len() > 10 {
            let base = name.unwrap_or("jaxpr").trim_matches(|c| c == '<' || c == '>').to_string();
            let count = *counts.get(&base).unwrap_or(&0);
            *counts.entry(base.clone()).or_default() += 1;
            let name = if count > 0 { format!("{base}{count}") } else { base };
            if count > 0 {
                *counts.entry(name.clone()).or_default() += 1;
            }
            out.push((j, name));
        }
        for e in &j.eqns {
            let mut subs = e.primitive.sub_jaxprs();
            if let Primitive::While { .. } = e.primitive {
                subs.reverse(); // JAX's params hold cond_jaxpr before body_jaxpr
            }
            queue.extend(subs.into_iter().map(|s| (s, eqn_name(&e.primitive))));
        }
    }
    out
}

impl Printer {
    /// The type text of `v` in the jaxpr being printed: `f32[4,8]`, or its typed form.
    fn ty(&self, v: &Var) -> String {
        if !self.types.is_empty() {
            if let Some(t) = self.cur.last().and_then(|&at| self.types.get(&(at, v.id))) {
                return t.clone();
            }
        }
        v.aval.short()
    }

    /// Prints `j` with its first line continuing the current line and later lines at `indent`.
    /// Prints `j` in its own naming scope (sub-jaxprs reuse variable ids of their own;
    /// the name counter continues across scopes, as in JAX).
    fn jaxpr(&mut self, j: &Jaxpr, indent: usize) {
        if let Some(name) = self.shared.get(&(j as *const Jaxpr)).cloned() {
            self.out.push_str(&name);
            return;
        }
        self.jaxpr_body(j, indent);
    }

    /// Prints `j` itself (even when it is shared) in its own naming scope.
    fn jaxpr_body(&mut self, j: &Jaxpr, indent: usize) {
        let saved_used = self.namer.used.take();
        let saved_names = self.namer.names.clone();
        self.cur.push(j as *const Jaxpr as usize);
        self.jaxpr_scoped(j, indent);
        self.cur.pop();
        self.namer.used = saved_used;
        self.namer.names = saved_names;
    }

    fn jaxpr_scoped(&mut self, j: &Jaxpr, indent: usize) {
        let consts: Vec<String> =
            j.constvars.iter().map(|v| format!("{}:{}", self.namer.bind_always(v), self.ty(v))).collect();
        let ins: Vec<String> =
            j.invars.iter().map(|v| format!("{}:{}", self.namer.bind_always(v), self.ty(v))).collect();
        let head = format!(
            "{{ lambda {}; {}. let",
            consts.join(" "),
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
        // A jaxpr that fits in the width prints on one line, equations joined by `; `, as
        // JAX's pretty printer does (`{ lambda ; a:f32[4]. let b:f32[4] = sin a; c:f32[4] =
        // mul b 2.0:f32[] in (c,) }`).
        // Sub-jaxprs (params, branches) stay one per line unless they hold one equation.
        if body.iter().all(|b| !b.contains('\n')) && (indent == 0 || body.len() == 1) {
            let one = format!("{head} {} in {outs} }}", body.join("; "));
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
            e.outputs.iter().map(|v| format!("{}:{}", self.namer.bind(v), self.ty(v))).collect();
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
                    let texts: Vec<String> = branches.iter().map(|b| render(self, b, indent + 4)).collect();
                    let flat = format!("({})", texts.join(" "));
                    let v = if !flat.contains('\n') && indent + 2 + "branches=".len() + flat.len() <= WIDTH {
                        flat
                    } else {
                        let mut v = String::from("(");
                        for t in texts {
                            v.push('\n');
                            v.push_str(&" ".repeat(indent + 4));
                            v.push_str(&t);
                        }
                        v.push('\n');
                        v.push_str(&" ".repeat(indent + 2));
                        v.push(')');
                        v
                    };
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
        if let Primitive::CustomJvpCall { name, .. } | Primitive::CustomVjpCall { name, .. } = &e.primitive {
            ps.insert(0, ("name".into(), name.clone()));
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
    print_typed(j, HashMap::new())
}

/// Adds to `types` the varying mesh axes of the values of every `shard_map` body in `j`
/// traced with `check_vma`, after their type (`f32[3]{V:i}`, `f32[2,2]{V:(i,j)}`), as JAX
/// prints them.
fn add_body_vmas(j: &Jaxpr, types: &mut HashMap<(usize, u32), String>) {
    for e in &j.eqns {
        if let Primitive::ShardMap(sm) = &e.primitive {
            for (at, v, axes) in crate::transform::shard_map::body_var_vmas(sm) {
                let suffix = match axes.as_slice() {
                    [a] => format!("{{V:{a}}}"),
                    many => format!("{{V:({})}}", many.join(",")),
                };
                let t = types.entry((at, v.id)).or_insert_with(|| v.aval.short());
                t.push_str(&suffix);
            }
        }
        for sub in e.primitive.sub_jaxprs() {
            add_body_vmas(sub, types);
        }
    }
}

/// Prints `j` with the given variables' types (`sharding_types::var_types`), and the
/// varying axes of `shard_map` bodies' values.
fn print_typed(j: &Jaxpr, mut types: HashMap<(usize, u32), String>) -> String {
    add_body_vmas(j, &mut types);
    let mut p = Printer {
        namer: Namer { names: HashMap::new(), next: 0, used: None },
        out: String::new(),
        shared: HashMap::new(),
        types,
        cur: vec![],
    };
    let shared = shared_jaxprs(j);
    p.shared = shared.iter().map(|(sub, name)| (*sub as *const Jaxpr, name.clone())).collect();
    for (sub, name) in shared {
        p.out.push_str(&format!("let {name} = "));
        p.jaxpr_body(sub, 0);
        p.out.push_str(" in\n");
    }
    let mut used = HashSet::new();
    collect_used(j, &mut used);
    p.namer.used = Some(used);
    p.cur.push(j as *const Jaxpr as usize);
    p.jaxpr_scoped(j, 0);
    p.out
}

impl fmt::Display for Jaxpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_jaxpr(self))
    }
}

impl fmt::Display for ClosedJaxpr {
    /// JAX's text; a jaxpr traced on sharded or pinned-host arguments shows typed values
    /// (`a:f32[8@x]`, `b:f32<host>[8]`; `ClosedJaxpr::in_types`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.in_types {
            Some(t) => f.write_str(&print_typed(&self.jaxpr, crate::sharding_types::var_types(&self.jaxpr, t))),
            None => f.write_str(&print_jaxpr(&self.jaxpr)),
        }
    }
}
