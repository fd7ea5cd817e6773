"""201-13-gpu-memory: memory_stats with JAX's keys and the machine's memory as the limit,
live buffers by site, the RESOURCE_EXHAUSTED error (cell tagged raises-exception) and
the session going on, donation keeping memory flat, the XLA_* variables parsed."""
import re
import struct

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-13-gpu-memory"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def machine_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024


def test_memory_stats_dict_and_limit(nb):
    text = outputs_text(cell_with(nb, "let before = memory_stats()")).strip()
    keys = re.findall(r"'(\w+)': ", text)
    assert keys[:5] == ["bytes_in_use", "peak_bytes_in_use", "bytes_limit", "num_allocs", "largest_alloc_size"], text
    assert "'preallocate': False" in text and "'allocator': 'bfc'" in text, text
    assert int(re.search(r"'bytes_limit': (\d+)", text).group(1)) == machine_memory()


def test_array_takes_its_size_class(nb):
    # 4,000,000 bytes -> the size class 8 * 2^19 = 4 MiB.
    assert outputs_text(cell_with(nb, "memory_stats().bytes_in_use - before")).strip() == str(4 << 20)


def test_memory_magic_sites(nb):
    text = outputs_text(cell_with(nb, "%memory"))
    assert re.search(r"^jit\(f\)\s+1\s+4\.00 MiB$", text, re.M), text
    assert re.search(r"^device_put\s+\d+\s+", text, re.M), text


def test_oom_error_names_allocation_live_and_fixes(nb):
    assert outputs_text(cell_with(nb, "set_bytes_limit(Some(")).strip() == str(10 << 20)
    cell = cell_with(nb, "collect::<Result<Vec<Array>>>()")
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    e = errors[0]
    assert e.ename == "RuntimeError"
    assert e.evalue.startswith("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4194304 bytes "
                               "(4.00 MiB) for an output f32[1000,1000] at jit(f)."), e.evalue
    assert re.search(r"jit\(f\): 12\.00 MiB in 3 buffers", e.evalue), e.evalue
    for fix in ["donate_argnums", "checkpoint", "smaller batch", "XLA_CLIENT_MEM_FRACTION"]:
        assert fix in e.evalue, (fix, e.evalue)


def test_donation_keeps_memory_flat(nb):
    text = outputs_text(cell_with(nb, "let step = jit(")).strip()
    m = re.fullmatch(r"\((-?\d+), ([\d.]+)\)", text)
    assert m, text
    assert int(m.group(1)) == 0
    # 20 steps of z * 0.5 + 1 from z = 3 (x = 1: 2x + 1), in float32.
    z = 3.0
    for _ in range(20):
        z = struct.unpack("f", struct.pack("f", struct.unpack("f", struct.pack("f", z * 0.5))[0] + 1.0))[0]
    assert abs(float(m.group(2)) - z) < 1e-6, (text, z)


def test_limit_back_to_machine_memory(nb):
    assert outputs_text(cell_with(nb, "set_bytes_limit(None)")).strip() == "true"


def test_allocator_variables_parsed(nb):
    text = outputs_text(cell_with(nb, "parse_allocator_config(env)"))
    assert "preallocate: false" in text and "0.5" in text and 'allocator: "platform"' in text, text
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION is deprecated; use XLA_CLIENT_MEM_FRACTION instead" in text, text
