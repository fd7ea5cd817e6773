//! Op metadata (JAX's `jax.experimental.xla_metadata`): key/value pairs attached to the
//! equations traced inside a scope and written on their lowered ops.
//!
//! A per-thread stack of scopes, like `named_scope`'s. Each equation staged while a scope
//! is open carries the merged pairs (`Eqn::metadata`, an inner scope's value for a key
//! replaces an outer one's), rendered once per scope as an MLIR dictionary
//! `{mhlo.frontend_attributes = {tag = "my_block"}}`. Lowering writes it as the metadata of
//! each op's fused location, `loc(fused<{mhlo.frontend_attributes = {...}}>["jit(f)/sin"])`
//! (where XLA prints `frontend_attributes={tag="my_block"}` on an HLO instruction); it is
//! not a jaxpr equation and not printed in the jaxpr. Values are strings (JAX renders
//! `True` as `"true"`).

use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// Open scopes' pairs (outermost first) and the rendered attribute (`None`: no scope).
    static STACK: RefCell<(Vec<Vec<(String, String)>>, Option<Arc<str>>)> = const { RefCell::new((Vec::new(), None)) };
}

/// The rendered metadata of the open scopes, or `None` outside every scope.
pub fn current_metadata() -> Option<Arc<str>> {
    STACK.with(|s| s.borrow().1.clone())
}

/// Whether `m` is the current metadata (the trace cache's check; no clone).
pub fn is_current(m: &Option<Arc<str>>) -> bool {
    STACK.with(|s| s.borrow().1 == *m)
}

/// `key` as an MLIR dictionary key: bare when it is an identifier, else quoted.
fn mlir_key(key: &str) -> String {
    let mut chars = key.chars();
    let bare = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'));
    if bare {
        key.to_string()
    } else {
        crate::interactive::json_string(key)
    }
}

fn render(scopes: &[Vec<(String, String)>]) -> Option<Arc<str>> {
    let mut merged: Vec<(String, String)> = Vec::new();
    for (k, v) in scopes.iter().flatten() {
        match merged.iter_mut().find(|(mk, _)| mk == k) {
            Some(slot) => slot.1 = v.clone(),
            None => merged.push((k.clone(), v.clone())),
        }
    }
    if merged.is_empty() {
        return None;
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    let pairs: Vec<String> = merged.iter().map(|(k, v)| format!("{} = {}", mlir_key(k), crate::interactive::json_string(v))).collect();
    Some(Arc::from(format!("{{mhlo.frontend_attributes = {{{}}}}}", pairs.join(", "))))
}

fn update(f: impl FnOnce(&mut Vec<Vec<(String, String)>>)) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        f(&mut s.0);
        s.1 = render(&s.0);
    });
}

/// Metadata scope, open while the value lives:
/// `let _m = XlaMetadata::new(&[("tag", "my_block")]);` (JAX's
/// `with set_xla_metadata(tag="my_block"):`).
#[must_use = "the metadata applies until the guard is dropped"]
pub struct XlaMetadata {
    _private: (),
}

impl XlaMetadata {
    /// Opens a scope with `pairs` (key, value); keys already set by an outer scope take
    /// this scope's value inside it.
    pub fn new(pairs: &[(&str, &str)]) -> XlaMetadata {
        let v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        update(|s| s.push(v));
        XlaMetadata { _private: () }
    }
}

impl Drop for XlaMetadata {
    fn drop(&mut self) {
        update(|s| {
            s.pop();
        });
    }
}

/// `with jax.experimental.xla_metadata.set_xla_metadata(**pairs): f()`: runs `f` with
/// `pairs` attached to every equation it traces; their lowered ops carry
/// `mhlo.frontend_attributes` (see the module docs). Eager operations are not tagged.
pub fn set_xla_metadata<T>(pairs: &[(&str, &str)], f: impl FnOnce() -> T) -> T {
    let _m = XlaMetadata::new(pairs);
    f()
}

/// JAX's `xla_metadata_call(f, **pairs)` decorator: `f` wrapped so that each call runs
/// inside `set_xla_metadata(pairs, ..)`. (JAX also stages the call as its own HLO
/// computation; here the ops are tagged in place.)
pub fn xla_metadata_call<A, T>(pairs: &[(&str, &str)], f: impl Fn(A) -> T) -> impl Fn(A) -> T {
    let owned: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |a| {
        let refs: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        set_xla_metadata(&refs, || f(a))
    }
}
