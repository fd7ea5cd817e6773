"""201-12-controlling-xla: compiler options per function and on a lowered function."""
import math
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401
NAME = "201-12-controlling-xla"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def test_options_run_normally(nb):
    # JAX: Array(2., dtype=float32, weak_type=True) for sqrt(x**2) + 1 at 1.0
    text = outputs_text(cell_with(nb, '("optimization_level", "O3")]);'))
    assert re.search(r"Array\(2\.?, dtype=float32, weak_type=True\)", text), text
    text = outputs_text(cell_with(nb, "f.lower(1.0)?.compile()?.opt_level()"))
    assert text.strip() == "3", text


def test_unknown_option_is_an_error(nb):
    text = outputs_text(cell_with(nb, '"not_a_real_flag"'))
    assert "No such compile option: 'not_a_real_flag'" in text, text


def test_levels_differ_in_code_not_result(nb):
    text = outputs_text(cell_with(nb, "compile_with(&[(\"optimization_level\", \"O0\")])"))
    m = re.search(r"O0: (\d+) lines of assembly, O3: (\d+)", text)
    assert m and m.group(1) != m.group(2), text
    want = sum(math.sin(x) * math.cos(x) for x in range(1000))
    vals = [float(v) for v in re.findall(r"Array\((-?[0-9.e+-]+),", text)]
    assert len(vals) == 2, text
    for v in vals:
        assert abs(v - want) <= 1e-3 * max(1.0, abs(want)), (v, want, text)


def test_xla_flags_are_accepted_with_a_warning(nb):
    # JAX's page: a GPU-only flag is accepted on CPU. Here: accepted, with a UserWarning.
    text = outputs_text(cell_with(nb, '"xla_gpu_enable_latency_hiding_scheduler"'))
    assert re.search(r"Array\(2\.?, dtype=float32, weak_type=True\)", text), text
    assert ("UserWarning: compile option 'xla_gpu_enable_latency_hiding_scheduler' is an XLA flag; "
            "jaxrepl compiles through MLIR/LLVM, not XLA, so it has no effect here") in text, text


def test_op_metadata_rides_on_the_lowered_ops(nb):
    text = outputs_text(cell_with(nb, 'set_xla_metadata(&[("tag", "my_block")]'))
    m = re.search(r"Array\(([0-9.]+), dtype=float32, weak_type=True\)", text)
    assert m and abs(float(m.group(1)) - (math.sin(1.0) * math.cos(1.0) + 1.0)) < 1e-6, text
    text = outputs_text(cell_with(nb, "%lower tagged.call(1.0)"))
    assert 'mhlo.frontend_attributes = {tag = "my_block"}' in text, text
