//! A pending interrupt and the start of a cell (own process: the interrupt flag is
//! process-wide).

/// A Ctrl-C that came while an earlier cell was being built ("nothing ran") is dropped
/// when the next cell starts (`enter_cell`): that cell's first wait used to take it.
#[test]
fn a_pending_interrupt_is_dropped_when_a_cell_starts() {
    jax::runtime::interrupt::request();
    jax::interactive::enter_cell(7, "/nonexistent/lib.rs", "let y = 1;");
    assert!(!jax::runtime::interrupt::take_if_set(), "the interrupt was still pending in the new cell");
}
