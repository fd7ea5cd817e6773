"""201-06-shard-map: per-device programs and collectives on 8 simulated CPU devices.

Values are those of JAX's shard-map page run with 8 CPU devices (inventory §7.2, jax
0.11.1), recomputed here from the page's reference functions where they are data.
"""
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401
NAME = "201-06-shard-map"
X16 = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2]


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def ints(text):
    """The integers of the last Array(...) repr in `text`."""
    m = re.findall(r"Array\(\[([^\]]*)\]", text, re.S)
    assert m, text
    return [int(float(v)) for v in m[-1].replace(",", " ").split()]


def blocks(xs, n):
    k = len(xs) // n
    return [xs[i * k:(i + 1) * k] for i in range(n)]


def test_eight_devices(nb):
    text = outputs_text(cell_with(nb, 'update_int("jax_num_cpu_devices", 8)'))
    assert "CpuDevice(id=7)" in text and "CpuDevice(id=8)" not in text, text


def test_reference_semantics(nb):
    got = ints(outputs_text(cell_with(nb, "let double = shard_map")))
    by_hand = ints(outputs_text(cell_with(nb, "let by_hand")))
    assert got == by_hand == [2 * i for i in range(8)]
    shards = outputs_text(cell_with(nb, "for s in y.addressable_shards()"))
    for k in range(4):
        assert "cpu:%d [%s.0, %s.0]" % (k, 4 * k, 4 * k + 2) in shards, shards


def test_explicit_mesh_takes_only_split_arguments(nb):
    # JAX 0.10.2: on an all-Explicit mesh an argument must already be split as in_specs say.
    text = outputs_text(cell_with(nb, "let double_e"))
    assert "Array([ 0.,  2.,  4.,  6.,  8., 10., 12., 14.], dtype=float32)" in text, text
    assert ("in_specs passed to shard_map: P('i',) does not match the specs of the input: P(None,) "
            "for arg: float32[8].") in text, text


def test_block_shapes(nb):
    text = outputs_text(cell_with(nb, "let mesh42"))
    assert "P(i, None) block: [3, 12]" in text and "P(i, j) block: [3, 6]" in text, text


def test_per_device_printing(nb):
    text = outputs_text(cell_with(nb, "let show"))
    want = "On cpu:0 at mesh coordinates (i,) = (0,):\n[0. 1. 2.]\n\nOn cpu:1 at mesh coordinates (i,) = (1,):\n[3. 4. 5.]"
    assert want in text, text
    assert "Array([ 0.,  2.,  4.,  6.,  8., 10.], dtype=float32)" in text, text


def test_collectives_match_reference_functions(nb):
    b = blocks(X16, 4)
    psum = [sum(col) for col in zip(*b)]
    assert ints(outputs_text(cell_with(nb, "let f_psum"))) == psum == [22, 20, 12, 17]
    assert ints(outputs_text(cell_with(nb, "let f_gather"))) == [3, 9, 5, 2] * 4
    assert ints(outputs_text(cell_with(nb, "let f_scatter"))) == psum
    assert ints(outputs_text(cell_with(nb, "let f_shift"))) == [6, 7, 0, 1, 2, 3, 4, 5]
    a2a = [x for d in range(4) for blk in b for x in blocks(blk, 4)[d]]
    assert ints(outputs_text(cell_with(nb, "let f_a2a"))) == a2a == [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2]
    assert ints(outputs_text(cell_with(nb, "let where_am_i"))) == [0, 1, 2, 3]


def test_check_vma_error(nb):
    text = outputs_text(cell_with(nb, "fn identity"))
    assert "shard_map applied to the function 'identity' was given out_specs which require replication" in text, text
    assert "The mesh given has shape (2,) with corresponding axis names ('i',)." in text, text
    assert "out_specs is P() which implies that the corresponding output value is replicated across mesh axis 'i', but could not infer replication over any axes" in text, text


def test_loop_carry_needs_pcast(nb):
    # JAX 0.10.2's TypeError for a carry that starts invariant and comes back varying.
    cells = [c for c in nb.cells if c.cell_type == "code" and "let add3 = shard_map" in c.source]
    assert len(cells) == 2, [c.source for c in cells]
    text = outputs_text(cells[0])
    assert "TypeError: scan body function carry input and carry output must have equal types" in text, text
    assert ("The input carry component loop_carry[1] has type float32[2] but the corresponding output carry "
            "component has type float32[2]{V:i}, so the manual axis types do not match.") in text, text
    assert "jax.lax.pcast(..., ('i',), to='varying')" in text, text
    text = outputs_text(cells[1])
    assert "init: float32[2]{V:i}" in text, text
    # Device k adds its block [2k, 2k+1] three times.
    assert "Array([ 0.,  3.,  6.,  9., 12., 15., 18., 21.], dtype=float32)" in text, text


def test_jaxpr_and_jit(nb):
    text = outputs_text(cell_with(nb, "let sm = shard_map"))
    assert "shard_map[" in text and "psum[axes=('i',) axis_index_groups=None]" in text, text
    assert "in_specs=(P('i',),)" in text and "out_specs=(P(),)" in text, text
    text = outputs_text(cell_with(nb, "let matmul = shard_map"))
    m = re.search(r"max \|shard_map - matmul\| = (\S+)", text)
    assert m and float(m.group(1)) < 1e-4, text


def test_implicit_pvary_of_an_invariant_operand(nb):
    # jax-inventory 7.2 item 9: the invariant operand made varying before the product.
    cell = cell_with(nb, "let scale = shard_map")
    text = outputs_text(cell)
    assert "in_specs=(P('i',), P())" in text, text
    assert "jaxpr={ lambda ; d:f32[3]{V:i} e:f32[3]. let\n          f:f32[3]{V:i} = pvary[axes=('i',)] e\n          g:f32[3]{V:i} = mul d f\n" in text, text
    assert "Array([ 0.,  2.,  6.,  3.,  8., 15.], dtype=float32)" in text, text


def test_jit_compiles_the_body(nb):
    text = outputs_text(cell_with(nb, "%compile jm.call"))
    assert "// jaxrepl: shard_map over Mesh('i': 4, 'j': 2" in text, text
    assert "manual axes ('i', 'j'); path: partitioned (one per-device program on each of the 8 devices at once, 1 collective per device; no gather)" in text, text
    assert "psum[axes=('j',) axis_index_groups=None]" in text and "dot_general" in text and "func.func" in text, text


def test_lower_shows_a_manual_computation(nb):
    text = outputs_text(cell_with(nb, "%lower jm.call"))
    assert text.startswith("module @jit__lambda attributes {mhlo.num_partitions = 8 : i32}"), text
    assert 'sdy.mesh @mesh = <["i"=4, "j"=2]>' in text, text
    assert ('sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"i"}, {"j"}]>, <@mesh, [{"j"}, {}]>] '
            'out_shardings=[<@mesh, [{"i"}, {}]>] manual_axes={"i", "j"}') in text, text
    # psum over 'j': groups of the two devices sharing an 'i' coordinate.
    assert '"stablehlo.all_reduce"' in text and "replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>" in text, text
    assert "sdy.return" in text, text


def test_cost_is_per_device_and_total(nb):
    text = outputs_text(cell_with(nb, "%cost jm.call"))
    m = re.search(r"per device \(each of 8 devices runs the per-device program\)\n\{'flops': (\S+), 'transcendentals': (\S+), "
                  r"'bytes accessed': (\S+)\}\ntotal over 8 devices\n\{'flops': (\S+), 'transcendentals': (\S+), 'bytes accessed': (\S+)\}", text)
    assert m, text
    per, total = [float(v) for v in m.groups()[:3]], [float(v) for v in m.groups()[3:]]
    # Per device: a 2x8 block times an 8x4 block (2*2*4*8 flops) plus the psum's 8 additions.
    assert per[0] >= 2 * 2 * 4 * 8 + 8, text
    assert total == [8 * v for v in per], text
