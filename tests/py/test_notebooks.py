"""Golden notebook: notebooks/201-01-jit.ipynb executed by a real Jupyter client (nbclient)
on the `jaxrepl` kernel, then chosen outputs checked (not only that it ran).

Run by `make test` (which builds the kernel and exports JAXREPL_KERNEL_BIN); the kernelspec
comes from conftest.py's `jaxrepl_kernelspec` fixture. Missing pieces -- the notebook, the
kernel binary -- are test failures with a message, never skips: the notebook is the test.
"""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "201-01-jit.ipynb")
EXECUTED = os.path.join(ROOT, "notebooks", "201-01-jit.executed.ipynb")
KERNEL = "jaxrepl"
# Generous: a cold engine build in the evaluation child takes about a minute on 2 cores.
CELL_TIMEOUT_S = 900
STARTUP_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def executed(jaxrepl_kernelspec):
    """The notebook after a full run on the kernel (also written to EXECUTED for a look).
    `jaxrepl_kernelspec` (tests/py/conftest.py) installs the kernelspec of the kernel under
    test, and fails the test when there is no kernel binary."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if not os.path.isfile(NOTEBOOK):
        pytest.fail("%s does not exist (the engine lead writes it)" % os.path.relpath(NOTEBOOK, ROOT))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, kernel_name=jaxrepl_kernelspec.name, timeout=CELL_TIMEOUT_S,
                            startup_timeout=STARTUP_TIMEOUT_S, allow_errors=False,
                            coalesce_streams=True, resources={"metadata": {"path": ROOT}})
    try:
        client.execute()
    except CellExecutionError as e:
        nbformat.write(nb, EXECUTED)
        pytest.fail("a cell failed (cells expected to fail need the `raises-exception` tag); "
                    "executed notebook in %s\n%s" % (os.path.relpath(EXECUTED, ROOT), e))
    nbformat.write(nb, EXECUTED)
    return nb


def outputs_text(cell):
    """Everything a cell showed, as text: streams, text/plain results, errors."""
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif kind == "error":
            parts.append("%s: %s" % (out.get("ename"), out.get("evalue")))
    return "\n".join(parts)


def all_text(nb):
    return "\n".join(outputs_text(c) for c in nb.cells if c.cell_type == "code")


def test_notebook_names_the_jaxrepl_kernel():
    if not os.path.isfile(NOTEBOOK):
        pytest.fail("%s does not exist" % os.path.relpath(NOTEBOOK, ROOT))
    with open(NOTEBOOK) as f:
        meta = json.load(f).get("metadata", {})
    assert meta.get("kernelspec", {}).get("name") == KERNEL, meta
    assert meta.get("kernelspec", {}).get("language") == "rust", meta


def test_every_code_cell_ran(executed):
    code = [c for c in executed.cells if c.cell_type == "code" and c.source.strip()]
    assert code, "the notebook has no code cells"
    missing = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not missing, "code cells (0-based among code cells) without an execution count: %s" % missing


def test_only_tagged_cells_raise(executed):
    for i, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        tagged = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        assert tagged or not errors, "cell %d raised %s: %s" % (
            i, errors[0].get("ename"), errors[0].get("evalue"))
        if tagged:
            assert errors, "cell %d is tagged raises-exception but showed no error" % i


def test_shows_a_jaxpr_with_sin(executed):
    text = all_text(executed)
    jaxprs = re.findall(r"\{ lambda ;.*?\}", text, re.S)
    assert jaxprs, "no jaxpr (`{ lambda ; ... }`) in any output:\n" + text[:3000]
    assert any(re.search(r"=\s*sin\b", j) for j in jaxprs), "no jaxpr with a `sin` equation:\n" + "\n".join(jaxprs)


def test_shows_an_array_repr(executed):
    text = all_text(executed)
    assert re.search(r"Array\(\[.*?\], dtype=float32\)", text, re.S), \
        "no numpy-style `Array([...], dtype=float32)` in any output:\n" + text[:3000]


def test_explains_a_cache_miss(executed):
    text = all_text(executed)
    assert re.search(r"cache miss", text, re.I), \
        "no cache-miss explanation (jax_explain_cache_misses) in any output:\n" + text[:3000]


def cell_with(nb, needle):
    """The first code cell whose source contains `needle` (fails clearly if none)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and needle in cell.source:
            return cell
    pytest.fail("no code cell containing %r in %s" % (needle, os.path.relpath(NOTEBOOK, ROOT)))


# jax 0.10.2: print(jax.make_jaxpr(lambda x: jnp.sin(x) * 2.0 + 1.0)(jnp.arange(8.0)))
JAXPR_SIN = """{ lambda ; a:f32[8]. let
    b:f32[8] = sin a
    c:f32[8] = mul b 2.0:f32[]
    d:f32[8] = add c 1.0:f32[]
  in (d,) }"""


def test_jaxpr_text_matches_jax(executed):
    cell = cell_with(executed, "make_jaxpr(|x: Array| x.sin() * 2.0 + 1.0")
    assert JAXPR_SIN in outputs_text(cell), "expected JAX's text:\n%s\ngot:\n%s" % (JAXPR_SIN, outputs_text(cell))


def test_side_effect_runs_only_while_tracing(executed):
    # g traced for f32[8], hit for the second call, retraced for f32[3]: two prints.
    cell = cell_with(executed, 'println!("tracing with')
    text = outputs_text(cell)
    assert text.count("tracing with") == 2, text


def test_cache_miss_names_the_type_change(executed):
    # double: called with i32[3], then f32[3]; JAX says "now f32[3] and before i32[3]".
    text = all_text(executed)
    assert "f32[3]" in text and "i32[3]" in text, text[:3000]
