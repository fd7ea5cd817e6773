"""201-14 memory spaces: outputs of notebooks/201-14-memory-spaces.ipynb checked against
JAX's behaviour on CPU (jax 0.10.2 texts, inventory sections 15 and 1.4): the memories a
device addresses, shardings with a memory kind and JAX's error for an unknown kind,
device_put between kinds keeping values, per-kind accounting (a device's bytes drop when
parameters move to host memory), the device memory saved by offloading Adam's state
with the same losses, and jit outputs made in host memory (out_shardings with a memory
kind, device_put to a memory kind inside jit: the device's bytes do not move;
mhlo.memory_kind in the lowered text as JAX's lowering writes it)."""
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-14-memory-spaces"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def errors(cell):
    return [(o["ename"], o["evalue"]) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def test_memories(nb):
    text = outputs_text(cell_with(nb, "addressable_memories()"))
    assert text.splitlines()[:3] == ["[CPU_DEVICE_0, PINNED_HOST_1, UNPINNED_HOST_2]", "CPU_DEVICE_0",
                                     "CpuDeviceMemory(id=0, process_index=0, client=cpu)"], text


def test_shardings_with_memory_kind(nb):
    text = outputs_text(cell_with(nb, 'with_memory_kind("pinned_host")?;'))
    assert "NamedSharding(mesh=Mesh('x': 1, axis_types=(Auto,)), spec=P('x',), memory_kind=device)" in text, text
    assert "NamedSharding(mesh=Mesh('x': 1, axis_types=(Auto,)), spec=P('x',), memory_kind=pinned_host)" in text, text
    errs = errors(cell_with(nb, 's_dev.with_memory_kind("hbm")'))
    assert errs == [("ValueError", "Could not find memory addressable by device cpu. Device cpu can address the following "
                                   "memory kinds: device, pinned_host, unpinned_host. Got memory kind: hbm")], errs


def test_device_put_between_kinds(nb):
    text = outputs_text(cell_with(nb, "let arr_host = device_put"))
    assert text.startswith("pinned_host"), text
    assert re.search(r"Array\(\[\[0\., 1\., 2\., 3\.\],\s*\[4\., 5\., 6\., 7\.\]\], dtype=float32\)", text), text
    # JAX 0.10.2 on CPU: the memory space is in the type and results stay in pinned host
    # memory; out_shardings in device memory gives a device result.
    text = outputs_text(cell_with(nb, "jit(|x: Array| x + 1.0).call(&arr_host)"))
    assert text.splitlines()[:3] == ["float32<host>[2,4]", "pinned_host", "device"], text
    assert re.search(r"Array\(\[\[1\., 2\., 3\., 4\.\],\s*\[5\., 6\., 7\., 8\.\]\], dtype=float32\)", text), text


def test_sharded_host_array(nb):
    text = outputs_text(cell_with(nb, 'with_memory_kind("unpinned_host")?)?;'))
    assert "spec=P('i',), memory_kind=unpinned_host)" in text, text
    assert "[32, 32, 32, 32, 32, 32, 32, 32]" in text, text


def test_offloading_params_moves_the_bytes(nb):
    text = outputs_text(cell_with(nb, "let params = {"))
    assert "on device:     device +1048576 bytes, pinned_host +0 bytes" in text, text
    assert "offloaded:     device +0 bytes, pinned_host +1048576 bytes" in text, text


def test_offloading_optimizer_state_saves_device_memory(nb):
    text = outputs_text(cell_with(nb, "device memory saved"))
    got = dict(re.findall(r"^(device-resident state|offloaded state|device memory saved|pinned_host holds):\s+(?:device holds )?(-?\d+)", text, re.M))
    assert got == {"device-resident state": "3145728", "offloaded state": "1048576",
                   "device memory saved": "2097152", "pinned_host holds": "2097152"}, text
    dev = re.search(r"losses on device:  \[(.*)\]", text).group(1)
    off = re.search(r"losses offloaded:  \[(.*)\]", text).group(1)
    assert dev == off, text
    losses = [float(v) for v in dev.split(",")]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2] > 0, losses


def test_outputs_in_host_memory(nb):
    text = outputs_text(cell_with(nb, "let scale = jit("))
    lines = text.splitlines()
    assert lines[:3] == ["pinned_host", "device +0 bytes, pinned_host +1048576 bytes", "pinned_host"], text
    assert lines[3].startswith("func.func public @main(") and 'mhlo.memory_kind = "pinned_host"' in lines[3], text
    assert ", output_size_in_bytes=0," in lines[4] and "host_output_size_in_bytes=1048576" in lines[4], text


def test_memory_analysis_host_sizes_are_zero(nb):
    text = outputs_text(cell_with(nb, "adam.lower("))
    assert "host_output_size_in_bytes=0" in text and "host_argument_size_in_bytes=0" in text, text
