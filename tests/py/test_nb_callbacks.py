"""201-07 callbacks: outputs of notebooks/201-07-callbacks.ipynb checked against JAX's
behaviour (jax 0.10.2 texts, inventory section 8): pure_callback values under eager/jit/
scan/vmap (f32 sin against math.sin), the pure_callback equation, JAX's JVP and vmap
errors, dead-code elimination of an unused pure_callback, the error raised inside a
callback naming it, io_callback's one call per vmap element, debug.callback under
jit/vmap/grad, one global call on sharded data, and grad through custom_jvp."""
import math
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-07-callbacks"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def errors(cell):
    return [(o["ename"], o["evalue"]) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def floats(text):
    m = re.search(r"Array\(\[([^\]]*)\]", text)
    assert m, text
    return [float(v) for v in m.group(1).replace("\n", " ").split(",")]


def test_eight_devices(nb):
    text = outputs_text(cell_with(nb, 'update_int("jax_num_cpu_devices", 8)'))
    assert "CpuDevice(id=7)" in text, text


def test_println_sees_a_tracer_debug_print_a_value(nb):
    text = outputs_text(cell_with(nb, 'debug::print!("intermediate value: {}", y)'))
    lines = [l for l in text.splitlines() if l.startswith("intermediate value: ")]
    assert len(lines) == 2 and "Tracer" in lines[0], text
    assert lines[1] == "intermediate value: 3", text


@pytest.mark.parametrize("needle", ["f(x.clone())?", "jit(f).call(&x)?", "ys\n", "vmap(f)(x.clone())?"])
def test_pure_callback_sin_everywhere(nb, needle):
    cell = cell_with(nb, "lax::scan(|(c, xi)") if needle == "ys\n" else cell_with(nb, needle)
    vals = floats(outputs_text(cell))
    assert len(vals) == 5 and all(abs(v - math.sin(i)) < 1e-6 for i, v in enumerate(vals)), vals


def test_jaxpr_shows_pure_callback(nb):
    text = outputs_text(cell_with(nb, "make_jaxpr(f, &x)?"))
    for part in ["b:f32[5] = pure_callback[", "callback=<function host_sin>",
                 "result_avals=(ShapedArray(float32[5]),)", "sharding=None", "vmap_method=sequential"]:
        assert part in text, text


def test_grad_of_pure_callback_is_jax_error(nb):
    errs = errors(cell_with(nb, "grad(|x: Array| -> Result<Array> { Ok(f(x)?.sum()) })"))
    assert errs == [("ValueError", "Pure callbacks do not support JVP. Please use `custom_jvp` to use callbacks while taking gradients.")], errs


def test_unused_pure_callback_is_eliminated(nb):
    text = outputs_text(cell_with(nb, "let _unused = pure_callback"))
    f1, f2 = text.split("f2:")
    assert f1.count("printing something") == 1, text
    assert "printing something" not in f2, text


def test_vmap_methods(nb):
    text = outputs_text(cell_with(nb, 'for method in ["sequential"'))
    seq = [l for l in text.splitlines() if l.startswith("host sees")]
    assert seq[:3] == ["host sees shapes [2] and [2]"] * 3, text
    assert seq[3] == "host sees shapes [3, 2] and [1, 2]", text
    assert seq[4] == "host sees shapes [3, 2] and [3, 2]", text
    for m in ("sequential", "expand_dims", "broadcast_all"):
        assert re.search(m + r": \[\[10\.? +21\.?\]\s*\[12\.? +23\.?\]\s*\[14\.? +25\.?\]\]", text), text
    errs = errors(cell_with(nb, "pure_callback(host_sin, &[ShapeDtypeStruct::like(&x)], &[x], None))(xs.clone())"))
    assert errs and errs[0][0] == "NotImplementedError", errs
    assert errs[0][1] == ("vmap is only supported for the pure_callback primitive when vmap_method is one of 'sequential', "
                          "'sequential_unrolled', 'expand_dims', 'broadcast_all', or 'legacy_vectorized'. Got vmap_method=None."), errs


def test_error_in_callback_names_it(nb):
    assert "[1, 2, 3]" in outputs_text(cell_with(nb, "A loop never calls")) or \
        "[0, 1, 2, 3]" in outputs_text(cell_with(nb, "A loop never calls")), outputs_text(cell_with(nb, "A loop never calls"))
    errs = errors(cell_with(nb, "vmap(checked)(jnp::arange(4))"))
    assert errs == [("RuntimeError", "pure_callback `raise_if_negative` failed: ValueError: value of x is 0")], errs


def test_io_callback(nb):
    text = outputs_text(cell_with(nb, "jit(move |x: Array| random_like(&r, x, false))"))
    assert text.count("generating float32[5]") == 1, text
    first = floats(text)
    assert len(first) == 5 and all(0 <= v < 1 for v in first) and len(set(first)) == 5, first
    text = outputs_text(cell_with(nb, "vmap(|x: Array| random_like(&rng, x, false))"))
    assert text.count("generating float32[]") == 5, text
    second = floats(text)
    # The host generator's state carries over: new numbers, not a replay.
    assert len(second) == 5 and all(0 <= v < 1 for v in second) and not set(first) & set(second), (first, second)
    errs = errors(cell_with(nb, "vmap(|x: Array| ordered.call(&x))"))
    assert errs == [("ValueError", "Cannot `vmap` ordered IO callback.")], errs
    text = outputs_text(cell_with(nb, "random_like(&rng, xi, true)"))
    assert text.count("generating float32[]") == 5, text
    cell = cell_with(nb, "Ok(random_like(&rng, x, false)?.sum())")
    assert errors(cell) == [("ValueError", "IO callbacks do not support JVP.")], errors(cell)
    # JAX raises from the JVP rule, before the host function runs.
    assert "generating" not in outputs_text(cell), outputs_text(cell)


def test_debug_callback(nb):
    text = outputs_text(cell_with(nb, "fn log_value"))
    logs = [l for l in text.splitlines() if l.startswith(("log:", "jit:", "vmap:", "grad:"))]
    assert logs == ["jit:", "log: 1.0", "vmap:"] + ["log: %.1f" % i for i in range(5)] + ["grad:", "log: 1.0"], text
    m = re.search(r"Array\(([-\d.e]+), dtype=float32", text)
    assert m and abs(float(m.group(1)) - math.cos(1.0)) < 1e-6, text


def test_sharded_data_one_global_call(nb):
    text = outputs_text(cell_with(nb, "callback received shape"))
    assert [l for l in text.splitlines() if l.startswith("callback received")] == ["callback received shape [8]"], text
    assert floats(text) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0], text


def test_custom_jvp_gradient(nb):
    text = outputs_text(cell_with(nb, "let sin_cb = custom_jvp"))
    m = re.search(r"Array\(([-\d.e]+), dtype=float32", text)
    assert m and abs(float(m.group(1)) - math.cos(2.0)) < 1e-6, text
