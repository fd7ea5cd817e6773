"""201-04-placement: 8 simulated devices set in the first cell, the frozen-config error,
mesh reprs, uncommitted vs committed arrays, shards of a device_put, JAX's incompatible-
devices error (eager and jit), uncommitted values following committed ones, moving data
between meshes, reversed device order, a pipeline over stage meshes. Values are checked
against host computations here."""
import math
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-04-placement"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def lines(cell):
    """A cell's output lines (streams, then the value), without blank lines."""
    return [line for line in outputs_text(cell).splitlines() if line.strip()]


def errors(cell):
    return [o for o in cell.outputs if o.output_type == "error"]


def test_eight_devices(nb):
    text = outputs_text(cell_with(nb, '"jax_num_cpu_devices", 8')).strip()
    assert text == "[" + ", ".join("CpuDevice(id=%d)" % i for i in range(8)) + "]", text


def test_config_frozen_after_start(nb):
    (e,) = errors(cell_with(nb, '"jax_num_cpu_devices", 4'))
    assert e.ename == "RuntimeError"
    assert e.evalue.startswith("jax_num_cpu_devices config should be updated before backends are initialized"), e.evalue


def test_mesh_reprs(nb):
    assert outputs_text(cell_with(nb, "let full = make_mesh")).strip() == \
        "Mesh(axis_sizes=(8,), axis_names=('x',), axis_types=(Explicit,))"
    text = lines(cell_with(nb, "let mesh_a = Mesh::new"))
    assert text[0] == "Mesh('x': 4, axis_types=(Explicit,))"
    assert text[1] == "[CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3)]"
    assert text[2] == "[CpuDevice(id=4), CpuDevice(id=5), CpuDevice(id=6), CpuDevice(id=7)]"


def test_uncommitted_by_default(nb):
    text = outputs_text(cell_with(nb, "let x = jnp::arange(4.0)")).strip()
    assert text == "(false, SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device))", text


def test_device_put_commits_and_shards(nb):
    text = outputs_text(cell_with(nb, "let xa = device_put")).strip()
    assert text == "committed: true\ntype: float32[8@x]", text
    lines = outputs_text(cell_with(nb, "for s in xa.addressable_shards()")).strip().splitlines()
    assert len(lines) == 4
    for k, line in enumerate(lines):
        m = re.fullmatch(r"cpu:(\d) \[Some\(\((\d), (\d)\)\)\] \[([\d. ]+)\]", line)
        assert m, line
        assert int(m.group(1)) == k
        lo, hi = int(m.group(2)), int(m.group(3))
        assert (lo, hi) == (2 * k, 2 * k + 2)
        assert [float(v) for v in m.group(4).split()] == [float(v) for v in range(lo, hi)]


def test_mixing_committed_devices_is_an_error(nb):
    assert outputs_text(cell_with(nb, "(a.committed(), b.committed())")).strip() == "(true, true)"
    (e,) = errors(cell_with(nb, "jnp::add(&a, &b)"))
    assert e.ename == "ValueError"
    assert e.evalue.startswith("Received incompatible devices for jitted computation. Got argument x of add with shape "
                               "float32[] and with device ids [0] on platform CPU and argument y of add with shape "
                               "float32[] and with device ids [1] on platform CPU"), e.evalue
    (e,) = errors(cell_with(nb, "f.call((&a, &b))"))
    assert e.ename == "ValueError"
    assert "Got argument args[0] of f with shape float32[] and with device ids [0]" in e.evalue, e.evalue
    assert "argument args[1] of f with shape float32[] and with device ids [1]" in e.evalue, e.evalue


def test_uncommitted_follows(nb):
    text = outputs_text(cell_with(nb, "let c = &a + &Array::scalar(3.0f32)")).strip()
    assert text == ("(4.0, NamedSharding(mesh=Mesh('x': 1, axis_types=(Explicit,)), spec=P(), "
                    "memory_kind=device))"), text


def test_device_put_moves_between_meshes(nb):
    text = lines(cell_with(nb, "let xb = device_put(&xa"))
    assert text[0] == "true"
    assert text[1] == "[4, 5, 6, 7]"
    assert [float(v) for v in re.findall(r"[\d.]+", text[2])] == [float(i) for i in range(8)]


def test_reversed_mesh_moves_data(nb):
    text = outputs_text(cell_with(nb, "rev_devs.reverse()")).strip().splitlines()
    assert text[0] == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]"
    assert text[1] == "[7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]"
    assert text[2] == "same mesh: false"


def test_pipeline_over_stage_meshes(nb):
    text = lines(cell_with(nb, "let stage_meshes"))
    assert text[0] == "true"
    assert text[1] == "[[0, 1], [2, 3], [4, 5], [6, 7]]"
    got = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", text[2])]
    want = [i / 8.0 for i in range(8)]
    for _ in range(4):
        want = [math.tanh(v * 2.0 + 1.0) for v in want]
    assert len(got) == 8
    assert all(abs(g - w) < 1e-5 for g, w in zip(got, want)), (got, want)
