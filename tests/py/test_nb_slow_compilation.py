"""201-10 slow compilation: outputs of notebooks/201-10-slow-compilation.ipynb: the
jax_log_compiles lines (JAX's four lines, with our MLIR wording), the re-definition hint,
%explain's verdict lines, the unrolled-loop warning with its line, equation counts, the
fori_loop rewrite with the same result, and the IR dump files."""
import math
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-10-slow-compilation"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def test_log_compiles_lines(nb):
    text = outputs_text(cell_with(nb, 'config::update("jax_log_compiles", true)'))
    # JAX: Finished tracing + Compiling jit(<f>) with global shapes and types
    # (ShapedArray(float32[3]),). + Finished jaxpr to MLIR module conversion + Finished
    # XLA compilation, each with seconds.
    assert re.search(r"Finished tracing add_one for jit in [\d.]+ sec", text), text
    assert "Compiling jit(add_one) with global shapes and types (ShapedArray(float32[3]),)." in text, text
    assert re.search(r"Finished jaxpr to MLIR module conversion jit\(add_one\) in [\d.]+ sec", text), text
    assert re.search(r"Finished MLIR compilation of jit\(add_one\) in [\d.]+ sec", text), text
    assert "Array([2., 2., 2.], dtype=float32)" in text, text


def test_redefinition_hint_and_explain(nb):
    text = outputs_text(cell_with(nb, 'config::update("jax_explain_cache_misses", true)'))
    assert text.count("TRACING CACHE MISS") == 2, text
    assert "never seen function" in text, text
    assert "being re-defined repeatedly, preventing caching?" in text, text
    text = outputs_text(cell_with(nb, "%explain"))
    verdicts = [l for l in text.splitlines() if "  trace: " in l]
    assert verdicts, text
    last = verdicts[-1]
    assert "trace: miss (never seen function; another function was defined on the same line" in last, text
    assert "executable: hit (identical module compiled before)" in last, text
    assert "persistent: " in last, text


def test_unrolled_loop_warning_and_eqn_counts(nb):
    text = outputs_text(cell_with(nb, "fn unrolled_loop"))
    # JAX's unrolled_loop: Array([5000., ...]); here 1000 steps.
    assert "Array([1000., 1000., 1000., 1000.], dtype=float32)" in text, text
    assert re.search(r"tracing jit\(unrolled_loop\) staged 1000 of its 1000 equations at cell \d+, line \d+", text), text
    assert "Use lax::fori_loop or lax::scan" in text, text
    text = outputs_text(cell_with(nb, "%eqn-count slow.call"))
    assert text.startswith("jit(unrolled_loop): 1000 equations"), text
    # The loop body's line, in the notebook's own cell numbering (JAX: file:line).
    assert re.search(r"^\s+1000 100\.00%  cell \d+, line \d+$", text, re.M), text
    text = outputs_text(cell_with(nb, "let fast = jit("))
    assert "Array([1000., 1000., 1000., 1000.], dtype=float32)" in text, text
    assert "unrolled" not in text, text
    text = outputs_text(cell_with(nb, "%eqn-count fast.call"))
    m = re.match(r"jit\(.+?\): (\d+) equations", text)
    assert m and int(m.group(1)) < 5, text


def test_ir_dump_files(nb):
    text = outputs_text(cell_with(nb, 'config::update_str("jax_dump_ir_to"'))
    names = text.split()
    assert len(names) == 4, text
    stem = re.match(r"(jax_ir\d{4}_jit_dumped)", names[0]).group(1)
    assert names == [stem + ".eqn_count.txt", stem + ".jaxpr.txt", stem + "_compiled.mlir", stem + "_lowered.mlir"], names
    text = outputs_text(cell_with(nb, "let jaxpr_file"))
    assert text.startswith("{ lambda ; a:f32[8]. let") and "sin a" in text and "reduce_sum" in text, text


def cell_by_id(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def test_persistent_compilation_cache(nb):
    # First definition: JAX's miss and write lines (jax 0.11.1 wording), one entry file
    # named jit_<name>-<64 hex>-cache.
    text = outputs_text(cell_by_id(nb, "slow-pc-2"))
    m = re.search(r"PERSISTENT COMPILATION CACHE MISS for 'jit_cached' with key '(jit_cached-[0-9a-f]{64})'", text)
    assert m, text
    key = m.group(1)
    assert f"Writing jit_cached to persistent compilation cache with key '{key}'" in text, text
    want = sum(math.sin(i) * 2.0 + 1.0 for i in range(8))
    first = re.search(r"Array\(([-\d.]+), dtype=float32\)", text)
    assert first and abs(float(first.group(1)) - want) < 1e-4, text
    files = outputs_text(cell_by_id(nb, "slow-pc-3")).split()
    assert files == [key + "-cache"], files
    # After the in-memory caches are dropped, the entry is loaded: a hit line, no compile.
    text = outputs_text(cell_by_id(nb, "slow-pc-5"))
    assert f"Persistent compilation cache hit for 'jit_cached' with key '{key}'" in text, text
    assert "Finished MLIR compilation" not in text, text
    second = re.search(r"Array\(([-\d.]+), dtype=float32\)", text)
    assert second and second.group(1) == first.group(1), text
    text = outputs_text(cell_by_id(nb, "slow-pc-6"))
    verdicts = [l for l in text.splitlines() if "  trace: " in l]
    assert "persistent: hit (jit_cached-" in verdicts[-1] and "no MLIR passes" in verdicts[-1], text
