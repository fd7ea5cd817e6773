"""Golden notebook: notebooks/201-01-jit.ipynb executed by a real Jupyter client (nbclient)
on the `jaxrepl` kernel, then chosen outputs checked (not only that it ran).

Run by `make test` (which builds the kernel, installs its kernelspec under .jupyter/ and
exports JAXREPL_KERNEL_BIN). Missing pieces -- the notebook, the kernel binary, the
kernelspec -- are test failures with a message, never skips: the notebook is the test.
"""
import json
import os
import re
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK = os.path.join(ROOT, "notebooks", "201-01-jit.ipynb")
EXECUTED = os.path.join(ROOT, "notebooks", "201-01-jit.executed.ipynb")
KERNEL = "jaxrepl"
# Generous: a cold engine build in the evaluation child takes about a minute on 2 cores.
CELL_TIMEOUT_S = 900
STARTUP_TIMEOUT_S = 300


def find_kernelspec():
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        return KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        return None


@pytest.fixture(scope="module")
def jaxrepl_kernelspec():
    """The `jaxrepl` kernelspec, pointing at the kernel just built. `make test` installs it
    under JUPYTER_PATH; run alone, this installs it into a temporary JUPYTER_PATH from
    JAXREPL_KERNEL_BIN. (Replace with tests/py/conftest.py's fixture once that exists.)"""
    spec = find_kernelspec()
    tmp = None
    if spec is None:
        binary = os.environ.get("JAXREPL_KERNEL_BIN")
        if not binary or not os.access(binary, os.X_OK):
            pytest.fail("no `jaxrepl` kernelspec and no kernel binary to install one from "
                        "(JAXREPL_KERNEL_BIN=%r); run `make test`" % binary)
        tmp = tempfile.TemporaryDirectory(prefix="jaxrepl-jupyter-path-")
        subprocess.run([binary, "--install", tmp.name], check=True)
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [tmp.name] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])
        spec = find_kernelspec()
        if spec is None:
            pytest.fail("`%s --install %s` did not make a `jaxrepl` kernelspec" % (binary, tmp.name))
    if not os.access(spec.argv[0], os.X_OK):
        pytest.fail("kernelspec %s runs %s, which is not an executable file" % (spec.resource_dir, spec.argv[0]))
    yield spec
    if tmp is not None:
        tmp.cleanup()


@pytest.fixture(scope="module")
def executed(jaxrepl_kernelspec):
    """The notebook after a full run on the kernel (also written to EXECUTED for a look)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if not os.path.isfile(NOTEBOOK):
        pytest.fail("%s does not exist (the engine lead writes it)" % os.path.relpath(NOTEBOOK, ROOT))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S,
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
