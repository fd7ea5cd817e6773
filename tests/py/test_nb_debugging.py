"""201-09 debugging: outputs of notebooks/201-09-debugging.ipynb checked against JAX's
behaviour (jax 0.10.2 / the inventory's 0.11.1 texts): printed runtime values, per-element
vmap prints, forward-only grad prints, format errors, debug_nans naming the primitive,
disable_jit, tracer leaks."""
import math
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-09-debugging"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def errors(cell):
    return [(o["ename"], o["evalue"]) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def test_debug_print_shows_runtime_values(nb):
    text = outputs_text(cell_with(nb, 'debug::print!("debug::print!(x) -> {}", x)'))
    # println! ran at trace time on a tracer: no number in its line.
    line = next(l for l in text.splitlines() if l.startswith("println!(x) -> "))
    assert "2.0" not in line, text
    # JAX: jax.debug.print(x) -> 2.0 / jax.debug.print(y) -> 0.9092974 (f32 sin(2)).
    assert "debug::print!(x) -> 2.0" in text, text
    m = re.search(r"debug::print!\(y\) -> (\S+)  \(two decimals: (\S+)\)", text)
    assert m, text
    assert abs(float(m.group(1)) - math.sin(2.0)) < 1e-6, text
    assert m.group(2) == "%.2f" % math.sin(2.0), text


def test_print_is_a_debug_callback_equation(nb):
    text = outputs_text(cell_with(nb, "%jaxpr f.call(2.0)"))
    assert text.count("debug_callback[") == 2 and "effect=Debug" in text, text
    assert re.search(r"= sin a", text), text


def test_vmap_prints_each_element_and_grad_only_the_forward_pass(nb):
    text = outputs_text(cell_with(nb, "vmap(|x: Array|"))
    lines = [l for l in text.splitlines() if l.startswith(("x -> ", "y -> "))]
    want = ["x -> %.1f" % i for i in range(3)]
    assert lines[:3] == want, text
    ys = [float(l[5:]) for l in lines[3:]]
    assert len(ys) == 3 and all(abs(y - math.sin(i)) < 1e-6 for i, y in enumerate(ys)), text
    text = outputs_text(cell_with(nb, "grad(|x: Array|"))
    assert [l for l in text.splitlines() if l.startswith("x -> ")] == ["x -> 1.0"], text
    m = re.search(r"Array\(([-\d.e]+), dtype=float32", text)
    assert m and abs(float(m.group(1)) - math.cos(1.0)) < 1e-6, text


def test_ordered_prints_and_callback(nb):
    text = outputs_text(cell_with(nb, "ordered = true"))
    assert text.index("x -> 1") < text.index("y -> 2"), text
    assert "Array(3, dtype=int32, weak_type=True)" in text, text
    text = outputs_text(cell_with(nb, "Logged value"))
    assert "WARNING: Logged value: 1.0" in text, text
    assert "Array(2., dtype=float32, weak_type=True)" in text, text


def test_format_mismatch_is_a_value_error(nb):
    errs = errors(cell_with(nb, 'debug::print!("hello", x)'))
    assert errs and errs[0][0] == "ValueError", errs
    assert errs[0][1].startswith("Unused positional arguments to `debug::print!`: [f32[3]]"), errs


def test_debug_nans_names_log(nb):
    cell = cell_with(nb, 'config::update("jax_debug_nans", true)')
    errs = errors(cell)
    # JAX: FloatingPointError: invalid value (nan) encountered in log
    assert errs == [("FloatingPointError", "invalid value (nan) encountered in log")], errs
    assert "Invalid nan value encountered in the output of jit(" in outputs_text(cell), outputs_text(cell)
    tb = "\n".join(o["traceback"][-1] for o in cell.outputs if o.get("output_type") == "error")
    assert "cell" in tb or "line" in tb, tb
    assert "NaN" in outputs_text(cell_with(nb, "let _off = debug_nans(false)")) or \
        "nan" in outputs_text(cell_with(nb, "let _off = debug_nans(false)"))


def test_debug_infs_names_div(nb):
    errs = errors(cell_with(nb, 'config::update("jax_debug_infs", true)'))
    assert errs == [("FloatingPointError", "invalid value (inf) encountered in div")], errs


def test_disable_jit_prints_concrete_values(nb):
    text = outputs_text(cell_with(nb, "let _eager = disable_jit()"))
    inside = [l for l in text.splitlines() if l.startswith("inside: ")]
    # Traced once (a tracer), then run eagerly on the concrete value.
    assert inside == ["inside: JitTracer(~float32[])", "inside: Array(2., dtype=float32, weak_type=True)"], text
    assert "Array(4., dtype=float32, weak_type=True)" in text, text


def test_tracer_leaks(nb):
    errs = errors(cell_with(nb, "let _check = check_tracer_leaks()"))
    assert errs and errs[0][0] == "UnexpectedTracerError" and errs[0][1].startswith("Leaked trace of jit("), errs
    errs = errors(cell_with(nb, "let t = leaked.lock()"))
    assert errs and errs[0][1].startswith("Encountered an unexpected tracer."), errs


def test_breakpoint_without_stdin_prints_its_frame(nb):
    # nbclient allows no stdin: end of input, so jdb shows the frame and continues.
    text = outputs_text(cell_with(nb, "debug::breakpoint!(x, y)"))
    assert "Entering jdb:" in text and "(no input: continuing) frame:" in text, text
    assert "  x = 2.0" in text, text
    m = re.search(r"  y = (\S+)", text)
    assert m and abs(float(m.group(1)) - math.sin(2.0)) < 1e-6, text
    m = re.search(r"Array\(([-\d.]+), dtype=float32", text)
    assert m and abs(float(m.group(1)) - 2 * math.sin(2.0)) < 1e-6, text
