"""Golden notebooks: each notebook in NOTEBOOKS executed by a real Jupyter client
(nbclient) on the `jaxrepl` kernel, then chosen outputs checked (not only that it ran).
This module executes and checks OWN_NOTEBOOKS; every other notebook has its own
`test_nb_*.py` module (one notebook per module: `make test-py` spreads modules over
pytest-xdist workers with --dist loadfile, so each notebook runs once).

Run by `make test` (which builds the kernel and exports JAXREPL_KERNEL_BIN); the kernelspec
comes from conftest.py's `jaxrepl_kernelspec` fixture. Missing pieces -- a notebook, the
kernel binary -- are test failures with a message, never skips: the notebook is the test.
Each notebook runs once per test process (its executed copy is written next to it as
`*.executed.ipynb` for a look).
"""
import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = ["201-01-jit", "201-02-aot", "201-03-control-flow", "201-04-placement", "201-05-sharding",
             "201-06-shard-map", "201-07-callbacks", "201-08-profiling", "201-09-debugging",
             "201-10-slow-compilation", "201-11-precision", "201-12-controlling-xla", "201-13-gpu-memory",
             "201-14-memory-spaces"]
NOTEBOOK = os.path.join(ROOT, "notebooks", "201-01-jit.ipynb")
KERNEL = "jaxrepl"
# Generous: a cold engine build in the evaluation child takes about a minute on 2 cores.
CELL_TIMEOUT_S = 900
STARTUP_TIMEOUT_S = 300
_RUNS = {}


def notebook_path(name):
    return os.path.join(ROOT, "notebooks", name + ".ipynb")


def run_notebook(name, kernelspec):
    """The notebook `name` after a full run on the kernel (cached per test session)."""
    if name in _RUNS:
        return _RUNS[name]
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = notebook_path(name)
    executed_path = os.path.join(ROOT, "notebooks", name + ".executed.ipynb")
    if not os.path.isfile(path):
        pytest.fail("%s does not exist" % os.path.relpath(path, ROOT))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernelspec.name, timeout=CELL_TIMEOUT_S,
                            startup_timeout=STARTUP_TIMEOUT_S, allow_errors=False,
                            coalesce_streams=True, resources={"metadata": {"path": ROOT}})
    try:
        client.execute()
    except CellExecutionError as e:
        nbformat.write(nb, executed_path)
        pytest.fail("a cell failed (cells expected to fail need the `raises-exception` tag); "
                    "executed notebook in %s\n%s" % (os.path.relpath(executed_path, ROOT), e))
    nbformat.write(nb, executed_path)
    _RUNS[name] = nb
    return nb


@pytest.fixture(scope="module")
def executed(jaxrepl_kernelspec):
    """201-01 after a full run. `jaxrepl_kernelspec` (tests/py/conftest.py) installs the
    kernelspec of the kernel under test, and fails the test when there is no kernel binary."""
    return run_notebook("201-01-jit", jaxrepl_kernelspec)


@pytest.fixture(scope="module")
def executed_aot(jaxrepl_kernelspec):
    return run_notebook("201-02-aot", jaxrepl_kernelspec)


@pytest.fixture(scope="module")
def executed_cf(jaxrepl_kernelspec):
    return run_notebook("201-03-control-flow", jaxrepl_kernelspec)


# The notebooks checked here; each other notebook has its own module, `test_nb_*.py`,
# which imports `test_every_code_cell_ran` and `test_only_tagged_cells_raise` below (they
# take that module's `nb` fixture). One notebook per module, so `pytest -n 2 --dist
# loadfile` (make test-py) runs each notebook once, on one worker.
OWN_NOTEBOOKS = ["201-01-jit", "201-02-aot", "201-03-control-flow"]


@pytest.fixture(scope="module", params=OWN_NOTEBOOKS)
def nb(request, jaxrepl_kernelspec):
    """Each of this module's notebooks after a full run (the parameter is its name)."""
    return run_notebook(request.param, jaxrepl_kernelspec)


def outputs_text(cell):
    """Everything a cell showed, as text: streams, text/plain results, errors."""
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            text = out.get("data", {}).get("text/plain", "")
            if kind == "display_data" and text == "":
                # A compile-progress display, emptied when the compile ended (transient).
                continue
            parts.append(text)
        elif kind == "error":
            parts.append("%s: %s" % (out.get("ename"), out.get("evalue")))
    return "\n".join(parts)


def all_text(nb):
    return "\n".join(outputs_text(c) for c in nb.cells if c.cell_type == "code")


def test_every_notebook_is_executed_and_checked_by_one_module():
    seen = {name: "test_notebooks.py" for name in OWN_NOTEBOOKS}
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_nb_*.py"))):
        with open(path) as f:
            text = f.read()
        m = re.search(r'^NAME = "([^"]+)"', text, re.M)
        assert m, "%s names no notebook (NAME = ...)" % path
        assert m.group(1) not in seen, "%s and %s both run %s" % (seen.get(m.group(1)), path, m.group(1))
        seen[m.group(1)] = path
        assert "import test_every_code_cell_ran, test_only_tagged_cells_raise" in text, path
    assert sorted(seen) == sorted(NOTEBOOKS), seen


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_names_the_jaxrepl_kernel(name):
    path = notebook_path(name)
    if not os.path.isfile(path):
        pytest.fail("%s does not exist" % os.path.relpath(path, ROOT))
    with open(path) as f:
        meta = json.load(f).get("metadata", {})
    assert meta.get("kernelspec", {}).get("name") == KERNEL, meta
    assert meta.get("kernelspec", {}).get("language") == "rust", meta


def test_every_code_cell_ran(nb):
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code, "the notebook has no code cells"
    missing = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not missing, "code cells (0-based among code cells) without an execution count: %s" % missing


def test_only_tagged_cells_raise(nb):
    for i, cell in enumerate(nb.cells):
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
    pytest.fail("no code cell containing %r" % needle)


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


# ---- 201-02 aot ----------------------------------------------------------------------

# jax 0.10.2: print(jax.jit(lambda x, y: 2 * x + y).trace(3, 4).jaxpr)
JAXPR_AOT = """{ lambda ; a:i32[] b:i32[]. let
    c:i32[] = mul 2:i32[] a
    d:i32[] = add c b
  in (d,) }"""


def test_aot_jaxpr_matches_jax(executed_aot):
    text = outputs_text(cell_with(executed_aot, "let traced = f.trace((3, 4))?"))
    assert JAXPR_AOT in text, "expected JAX's text:\n%s\ngot:\n%s" % (JAXPR_AOT, text)


def test_aot_lowered_module_and_result(executed_aot):
    text = outputs_text(cell_with(executed_aot, "let lowered = traced.lower()?"))
    assert "module @jit_" in text and "func.func public @main(" in text, text
    text = outputs_text(cell_with(executed_aot, "let compiled = lowered.compile()?"))
    # jax: {'flops': 2.0, ... 'bytes accessed': 12.0}; compiled(3, 4) -> 10 (weak int32)
    assert "'flops': 2.0" in text and "'bytes accessed': 12.0" in text, text
    assert "-1" not in text, text
    assert re.search(r"Array\(10, dtype=int32, weak_type=True\)", text), text


def test_aot_memory_analysis(executed_aot):
    text = outputs_text(cell_with(executed_aot, "let stats = compiled.memory_analysis()"))
    assert "(8, 4, 0)" in text, text


def test_aot_cost_of_matmul_and_transcendentals(executed_aot):
    text = outputs_text(cell_with(executed_aot, "let mm = jit("))
    assert "'flops': 4194304.0" in text and "'bytes accessed': 229376.0" in text, text
    assert "'flops': 10.0, 'transcendentals': 5.0, 'bytes accessed': 40.0" in text, text


def test_aot_asm_has_x86_instructions(executed_aot):
    text = outputs_text(cell_with(executed_aot, "as_text_stage(Stage::Asm)"))
    assert re.search(r"^\s+(mov|lea|add|imul|ret|push|pop|vmov)\w*\s", text, re.M), text


def test_aot_llvm_stage_magic(executed_aot):
    text = outputs_text(cell_with(executed_aot, "%compile --stage llvm"))
    assert "define void @jaxrepl_entry" in text, text


def test_aot_diff_passes_names_passes(executed_aot):
    text = outputs_text(cell_with(executed_aot, "%diff-passes"))
    assert "// -----// IR Dump After one-shot-bufferize" in text, text[:3000]
    assert re.search(r"^\+.*memref", text, re.M), text[:3000]
    assert "passes changed the module" in text, text[-2000:]


def test_aot_compile_options(executed_aot):
    text = outputs_text(cell_with(executed_aot, 'compile_with(&[("opt_level", "0")])'))
    assert text.startswith("(0, ") and "Array(10, dtype=int32" in text, text
    text = outputs_text(cell_with(executed_aot, '"unroll_everything"'))
    assert "No such compile option: 'unroll_everything'" in text, text


def test_aot_static_argument_folded(executed_aot):
    text = outputs_text(cell_with(executed_aot, "static_argnums(&[0])"))
    assert "arith.constant dense<7> : tensor<i32>" in text and "%arg1" not in text, text
    assert re.search(r"Array\(19, dtype=int32", text), text


def test_aot_mismatched_call_and_transformation_errors(executed_aot):
    text = outputs_text(cell_with(executed_aot, "compiled.call((Array::from_slice"))
    assert "TypeError: Argument types differ from the types for which this computation was compiled." in text, text
    assert "compiled with int32[] and called with int32[3]" in text, text
    text = outputs_text(cell_with(executed_aot, "g_aot.call(&z))"))
    assert "Cannot apply JAX transformations to a function lowered and compiled for a particular signature." in text, text
    text = outputs_text(cell_with(executed_aot, "vmap(|z: Array| g.call(&z))"))
    assert "[19., 21., 23.]" in text, text  # g(x) = 2x + 1 on rows of arange(12)


# ---- 201-03 control flow -------------------------------------------------------------

# jax 0.11.1: jax.make_jaxpr(lambda x: lax.while_loop(lambda x: x < 10, lambda x: x + 1, x))(0)
JAXPR_WHILE = """{ lambda ; a:i32[]. let
    b:i32[] = while[
      body_jaxpr={ lambda ; c:i32[]. let d:i32[] = add c 1:i32[] in (d,) }
      body_nconsts=0
      cond_jaxpr={ lambda ; e:i32[]. let f:bool[] = lt e 10:i32[] in (f,) }
      cond_nconsts=0
    ] a
  in (b,) }"""


def test_cf_unrolled_python_loops(executed_cf):
    assert re.search(r"Array\(24, dtype=int32", outputs_text(cell_with(executed_cf, "f.call(3)"))), \
        outputs_text(cell_with(executed_cf, "f.call(3)"))
    text = outputs_text(cell_with(executed_cf, "make_jaxpr(|x: Array| { let mut y = x; for _ in 0..3"))
    assert text.count("= mul 2:i32[]") == 3, text
    assert "Array(6., dtype=float32)" in outputs_text(cell_with(executed_cf, "let sum = jit(")), \
        outputs_text(cell_with(executed_cf, "let sum = jit("))


def test_cf_bool_conversion_error(executed_cf):
    text = outputs_text(cell_with(executed_cf, "let bad = jit("))
    assert "TracerBoolConversionError" in text, text


def test_cf_cond_and_switch(executed_cf):
    text = outputs_text(cell_with(executed_cf, "(lax::cond(&Array::scalar(true)"))
    assert "[1.]" in text and "[-1.]" in text, text
    text = outputs_text(cell_with(executed_cf, "make_jaxpr(|(p, x): (Array, Array)| lax::cond"))
    assert "cond[" in text and "branches=(" in text and "convert_element_type[new_dtype=int32 weak_type=False]" in text, text
    assert "Array(-2., dtype=float32)" in outputs_text(cell_with(executed_cf, "lax::switch(")), \
        outputs_text(cell_with(executed_cf, "lax::switch("))


def test_cf_loops(executed_cf):
    assert "Array(10, dtype=int32, weak_type=True)" in outputs_text(
        cell_with(executed_cf, "lax::while_loop(|x: Array| x.lt(10), |x: Array| x + 1, Array::weak_scalar"))
    text = outputs_text(cell_with(executed_cf, "make_jaxpr(|x: Array| lax::while_loop"))
    assert JAXPR_WHILE in text, "expected JAX's text:\n%s\ngot:\n%s" % (JAXPR_WHILE, text)
    assert "Array(45, dtype=int32, weak_type=True)" in outputs_text(
        cell_with(executed_cf, "lax::fori_loop(0, 10, |(i, x): (Array, Array)| x + i, Array::weak_scalar"))
    text = outputs_text(cell_with(executed_cf, "make_jaxpr(|x: Array| lax::fori_loop(0, 10"))
    assert "scan[" in text and "length=10" in text, text
    # JAX's form: the static lower bound is a literal operand, no constvar (inventory 1.1).
    assert "{ lambda ; a:i32[]. let" in text and "] 0:i32[] a" in text, text
    text = outputs_text(cell_with(executed_cf, "let (total, cum) = lax::scan("))
    assert "10.0" in text and "[ 1.  3.  6. 10.]" in text, text


def test_cf_unrolling_vs_loop_cost(executed_cf):
    text = outputs_text(cell_with(executed_cf, "let unrolled = make_jaxpr("))
    unrolled = int(re.search(r"unrolled: (\d+) equations", text).group(1))
    looped = int(re.search(r"fori_loop: (\d+) equations", text).group(1))
    assert unrolled >= 200 and looped <= 3, text
