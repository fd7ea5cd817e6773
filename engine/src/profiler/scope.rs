//! `jax.named_scope`: a name stack per thread. Equations traced inside a scope carry it
//! (`Eqn::name_stack`), and lowering writes it as each op's location
//! (`loc("jit(f)/my_scope/sin")`), as JAX writes it into HLO metadata; it is not a jaxpr
//! equation. While a profile runs, a scope is also a span on the timeline.

use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The scope names, and their `/`-joined form (cached; `None` when empty).
    static STACK: RefCell<(Vec<String>, Option<Arc<str>>)> = const { RefCell::new((Vec::new(), None)) };
}

/// The current name stack (`outer/inner`), or `None` outside every scope.
pub fn current_name_stack() -> Option<Arc<str>> {
    STACK.with(|s| s.borrow().1.clone())
}

fn set(f: impl FnOnce(&mut Vec<String>)) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        f(&mut s.0);
        s.1 = if s.0.is_empty() { None } else { Some(Arc::from(s.0.join("/"))) };
    });
}

/// A named scope, open while the value lives: `let _s = NamedScope::new("layer1");`.
pub struct NamedScope {
    _span: Option<super::Span>,
}

impl NamedScope {
    /// Opens scope `name` (nested inside the current ones).
    pub fn new(name: &str) -> NamedScope {
        set(|v| v.push(name.to_string()));
        NamedScope { _span: super::span("scope", || name.to_string()) }
    }
}

impl Drop for NamedScope {
    fn drop(&mut self) {
        set(|v| {
            v.pop();
        });
    }
}

/// `with jax.named_scope(name): f()`: runs `f` inside scope `name`.
pub fn named_scope<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let _s = NamedScope::new(name);
    f()
}
