//! The values a failing cell must not lose: the earlier value of each variable a cell
//! binds again with its own top-level `let`.
//!
//! evcxr moves every stored variable into the cell's function when it starts and stores
//! the variables the cell binds when it ends; a cell that stops early (a panic, or `?` on
//! an `Err`) stores none of them, so a name the cell binds again would lose the value an
//! earlier cell gave it. The REPL session therefore starts such a cell by handing each
//! earlier value to [`keep_rebound`] (moved, when the cell does not use the name before
//! binding it again) or to [`Rebound::keep`] (cloned, when it does and the type is
//! `Clone`). When the cell fails, the session binds the name again from [`take_kept`] in a
//! cell of its own; when it succeeds, the next cell's start drops what was kept
//! ([`clear_kept`], called by `enter_cell`).
//!
//! Values stay on the thread that runs cells (evcxr's child runs every cell on its main
//! thread), so they need not be `Send`.

use std::any::Any;
use std::cell::RefCell;

/// The line the engine writes on stderr for each kept value: this prefix, then the
/// variable's name. The session reads it (and hides it) to know which names it can bind
/// again.
pub const KEPT_MARKER: &str = "\x1ejaxrepl-kept ";

thread_local! {
    static KEPT: RefCell<Vec<(String, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `value`, the value an earlier cell gave variable `name`, until this cell ends;
/// writes [`KEPT_MARKER`]` name` on stderr. Never fails.
pub fn keep_rebound<T: 'static>(name: &str, value: T) {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        k.retain(|(n, _)| n != name);
        k.push((name.to_string(), Box::new(value)));
    });
    eprintln!("{KEPT_MARKER}{name}");
}

/// The value kept for `name`, removed from the store; `None` when nothing (or a value of
/// another type) was kept for it.
pub fn try_take_kept<T: 'static>(name: &str) -> Option<T> {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let at = k.iter().position(|(n, v)| n == name && v.is::<T>())?;
        k.remove(at).1.downcast::<T>().ok().map(|b| *b)
    })
}

/// The value kept for `name` (the session binds it again with this after a failed
/// cell).
///
/// # Panics
/// When nothing of type `T` was kept for `name`: the session asks only for names the
/// engine reported with [`KEPT_MARKER`], with the type the variable had.
pub fn take_kept<T: 'static>(name: &str) -> T {
    try_take_kept(name).unwrap_or_else(|| panic!("no earlier value of `{name}` was kept"))
}

/// Drops every kept value (the cell that bound the names again succeeded).
pub fn clear_kept() {
    // Taken out first: a value's Drop may itself use the engine.
    let old = KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()));
    drop(old);
}

/// A borrowed earlier value, for keeping a copy when the cell reads the variable before
/// binding it again: `(&Rebound(&x)).keep("x")` clones `x` when its type is `Clone`
/// ([`KeepByClone`]) and keeps nothing otherwise ([`KeepNothing`]); bring both traits in
/// scope. (The choice is made by method lookup: the `Clone` impl is on `Rebound`, the
/// fallback on `&Rebound`, which lookup reaches only when the first does not apply.)
pub struct Rebound<'a, T>(pub &'a T);

/// Keeps a clone of the value (see [`Rebound`]).
pub trait KeepByClone {
    /// Keeps a clone under `name`.
    fn keep(&self, name: &str);
}

/// Keeps nothing: the value's type is not `Clone` (see [`Rebound`]).
pub trait KeepNothing {
    /// Does nothing.
    fn keep(&self, name: &str);
}

impl<T: Clone + 'static> KeepByClone for Rebound<'_, T> {
    fn keep(&self, name: &str) {
        keep_rebound(name, self.0.clone());
    }
}

impl<T> KeepNothing for &Rebound<'_, T> {
    fn keep(&self, _name: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NotClone(#[allow(dead_code)] u8);

    #[test]
    fn keeps_by_move_and_by_clone_and_takes_back() {
        clear_kept();
        keep_rebound("a", vec![1.0f32, 2.0]);
        let b = String::from("earlier");
        (&Rebound(&b)).keep("b");
        let c = NotClone(3);
        (&Rebound(&c)).keep("c");
        assert_eq!(try_take_kept::<String>("b").as_deref(), Some("earlier"));
        assert_eq!(b, "earlier"); // a clone was kept; the cell still has its own
        assert!(try_take_kept::<NotClone>("c").is_none()); // not Clone: nothing kept
        assert!(try_take_kept::<i32>("a").is_none()); // another type: left in place
        assert_eq!(take_kept::<Vec<f32>>("a"), vec![1.0, 2.0]);
        keep_rebound("d", 5u8);
        clear_kept();
        assert!(try_take_kept::<u8>("d").is_none());
    }
}
