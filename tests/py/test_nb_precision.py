"""201-11-precision: outputs of the precision notebook checked against JAX's text (jaxprs)
and against the error magnitudes each number format gives (the reference is the
engine's own f64-accumulated product, `F64_F64_F64`)."""
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401
NAME = "201-11-precision"

# jax 0.10.2: print(jax.make_jaxpr(lambda a: jnp.dot(a, a, precision='highest'))(jnp.ones((2, 2))))
JAXPR_HIGHEST = """{ lambda ; a:f32[2,2]. let
    b:f32[2,2] = dot_general[
      dimension_numbers=(([1], [0]), ([], []))
      precision=(Precision.HIGHEST, Precision.HIGHEST)
      preferred_element_type=float32
    ] a a
  in (b,) }"""

# The backward product of JAX's jaxpr for jit(grad(loss, argnums=1)) (inventory 12.2.2).
GRAD_BLOCK = """dot_general[
      dimension_numbers=(([0], [0]), ([], []))
      precision=BF16_BF16_F32
      preferred_element_type=float32
    ] e a
    g:f32[8,2] = transpose[permutation=(1, 0)] f"""

# Relative error bands (max|y - ref| / max|ref|) of each preset on random normal inputs.
BANDS = {
    "BF16_BF16_F32": (3e-4, 2e-2),
    "F16_F16_F32": (3e-5, 3e-3),
    "TF32_TF32_F32": (3e-5, 3e-3),
    "BF16_BF16_F32_X3": (1e-8, 5e-5),
    "TF32_TF32_F32_X3": (0.0, 2e-6),
    "BF16_BF16_F32_X6": (0.0, 2e-6),
    "BF16_BF16_F32_X9": (0.0, 2e-6),
    "F32_F32_F32": (0.0, 2e-6),
    "DEFAULT": (0.0, 2e-6),
}


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def errors_by_name(text):
    """`NAME  1.2e-3` rows (the loop's lines and the %precision compare table)."""
    rows = {}
    for m in re.finditer(r"^(\w+)(?: \(reference\))?\s+([0-9.]+e[-+]?[0-9]+)\b", text, re.M):
        rows[m.group(1)] = float(m.group(2))
    return rows


def test_all_ones_product_is_exact(nb):
    text = outputs_text(cell_with(nb, 'jnp::dot_with(&x, &x.t(), "BF16_BF16_F32")'))
    assert "[[8., 8., 8., 8.]," in text and "dtype=float32" in text, text


def test_jaxpr_shows_the_levels_as_jax(nb):
    text = outputs_text(cell_with(nb, 'jnp::dot_with(&a, &a, "highest")'))
    assert JAXPR_HIGHEST in text, "expected JAX's text:\n%s\ngot:\n%s" % (JAXPR_HIGHEST, text)


def test_each_preset_error_magnitude(nb):
    rows = errors_by_name(outputs_text(cell_with(nb, '"F64_F64_F64")?.to_vec')))
    assert len(rows) == 7, rows
    for name, err in rows.items():
        lo, hi = BANDS[name]
        assert lo <= err <= hi, "%s: %g outside [%g, %g]" % (name, err, lo, hi)
    assert rows["BF16_BF16_F32"] > 10 * rows["BF16_BF16_F32_X3"], rows
    assert rows["BF16_BF16_F32_X3"] > rows["BF16_BF16_F32_X6"], rows


def test_preferred_element_type(nb):
    text = outputs_text(cell_with(nb, "Some(DType::F32))"))
    assert "[[3., 3.]," in text and "dtype=float32" in text, text


def test_grad_keeps_the_algorithm(nb):
    text = outputs_text(cell_with(nb, "grad_argnums(loss, &[1])"))
    assert GRAD_BLOCK in text, text
    assert text.count("precision=BF16_BF16_F32") >= 2, text


def test_default_changes_lowering_not_jaxpr(nb):
    text = outputs_text(cell_with(nb, 'with_default_matmul_precision("highest")'))
    assert "// dot_general precision = [HIGHEST, HIGHEST]" in text, text
    assert "precision=None" in text, text
    text = outputs_text(cell_with(nb, 'with_default_matmul_precision("BF16_BF16_F32")'))
    m = re.search(r"(\d+) of 8192 entries changed", text)
    assert m and int(m.group(1)) > 4096, text
    assert "default after the block: None" in text, text


def test_precision_magic(nb):
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%precision")]
    show, set_bf16, reset = (outputs_text(c) for c in cells[:3])
    assert "jax_default_matmul_precision = None" in show, show
    assert "jax_default_matmul_precision = BF16_BF16_F32" in set_bf16, set_bf16
    assert "jax_default_matmul_precision = None" in reset, reset


def test_precision_compare_table(nb):
    text = outputs_text(cell_with(nb, "%precision compare"))
    assert text.startswith("precision"), text
    rows = errors_by_name(text)
    assert rows["F64_F64_F64"] == 0.0, text
    for name, (lo, hi) in BANDS.items():
        assert lo <= rows[name] <= hi, "%s: %g outside [%g, %g]\n%s" % (name, rows[name], lo, hi, text)


def test_unsupported_and_unknown_are_errors(nb):
    text = outputs_text(cell_with(nb, '"ANY_F8_ANY_F8_F32")'))
    assert "The precision 'ANY_F8_ANY_F8_F32' is not supported by dot_general on CPU" in text, text
    text = outputs_text(cell_with(nb, '"medium")'))
    assert "Unrecognized precision: 'medium'" in text, text
