"""201-10 slow compilation: outputs of notebooks/201-10-slow-compilation.ipynb: the
jax_log_compiles lines (JAX's four lines, with our MLIR wording), the re-definition hint,
%explain's verdict lines, the unrolled-loop warning with its line, equation counts, the
fori_loop rewrite with the same result, and the IR dump files."""
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook("201-10-slow-compilation", jaxrepl_kernelspec)


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
    assert re.search(r"tracing jit\(unrolled_loop\) staged 1000 of its 1000 equations at \S+:\d+:\d+", text), text
    assert "Use lax::fori_loop or lax::scan" in text, text
    text = outputs_text(cell_with(nb, "%eqn-count slow.call"))
    assert text.startswith("jit(unrolled_loop): 1000 equations"), text
    assert re.search(r"^\s+1000 100\.00%  \S+:\d+$", text, re.M), text
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
