"""201-05-sharding: shardings in types (JAX's `float32[8@X,4@Y]`), visualize_array_sharding
and %sharding tables byte-identical to JAX's (inventory §6.2 item 5) with an HTML grid
carrying per-device bytes, %mesh, shards of a replicated layout, propagation through
broadcasting adds and reductions (values equal to the single-device run), JAX's
explicit-sharding errors (ambiguous contraction, illegal result) and their fixes,
in_shardings/out_shardings, inspect_array_sharding and typeof_ inside jit, auto_axes and
explicit_axes (JAX 0.10.2's texts)."""
import re

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-05-sharding"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def lines(cell):
    """A cell's output lines (streams, then the value), without blank lines."""
    return [line for line in outputs_text(cell).splitlines() if line.strip()]


def errors(cell):
    return [o for o in cell.outputs if o.output_type == "error"]


def html_of(cell):
    return "\n".join(o.get("data", {}).get("text/html", "") for o in cell.outputs
                     if o.output_type in ("execute_result", "display_data"))


def table(s):
    """The table's lines, stripped, without blank lines between tables."""
    return "\n".join(line.strip() for line in s.strip().splitlines() if line.strip())


# JAX 0.11.1 + rich, 8 CPU devices, mesh (4, 2) ('X', 'Y'), array (8, 4).
XY = """
┌───────┬───────┐
│ CPU 0 │ CPU 1 │
├───────┼───────┤
│ CPU 2 │ CPU 3 │
├───────┼───────┤
│ CPU 4 │ CPU 5 │
├───────┼───────┤
│ CPU 6 │ CPU 7 │
└───────┴───────┘"""
X_NONE = """
┌──────────┐
│ CPU 0,1  │
├──────────┤
│ CPU 2,3  │
├──────────┤
│ CPU 4,5  │
├──────────┤
│ CPU 6,7  │
└──────────┘"""
XY_ONE_DIM = """
┌──────────┐
│  CPU 0   │
├──────────┤
│  CPU 1   │
├──────────┤
│  CPU 2   │
├──────────┤
│  CPU 3   │
├──────────┤
│  CPU 4   │
├──────────┤
│  CPU 5   │
├──────────┤
│  CPU 6   │
├──────────┤
│  CPU 7   │
└──────────┘"""
REPLICATED = """
┌───────────────────┐
│                   │
│                   │
│                   │
│                   │
│CPU 0,1,2,3,4,5,6,7│
│                   │
│                   │
│                   │
│                   │
└───────────────────┘"""


def test_mesh_and_types(nb):
    assert outputs_text(cell_with(nb, "set_mesh(&mesh).keep()")).strip() == \
        "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))"
    text = lines(cell_with(nb, "let x = device_put("))
    assert text[0] == "float32[8@X,4@Y]"
    assert text[1] == "float32[4@Y,8@X]"
    assert text[2] == ("NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), "
                       "spec=P('X', 'Y'), memory_kind=device)")


def test_mesh_magic(nb):
    cell = cell_with(nb, "%mesh")
    text = outputs_text(cell)
    assert text.splitlines()[0] == "Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))", text
    for r in range(4):
        row = [l for l in text.splitlines() if l.startswith("X=%d" % r)]
        assert len(row) == 1, text
        assert re.findall(r"CPU (\d)", row[0]) == [str(2 * r), str(2 * r + 1)], row
    assert "Y=0" in text and "Y=1" in text
    assert "CPU 7" in html_of(cell)


def test_visualize_matches_jax_and_html_has_bytes(nb):
    cell = cell_with(nb, "debug::visualize_array_sharding(&x)?")
    assert table(outputs_text(cell)) == table(XY)
    html = html_of(cell)
    # Each device holds a 2x2 float32 block: 16 bytes; the array is 128 bytes.
    assert html.count(">16 B<") == 8, html
    assert "float32[8@X,4@Y] · 128 B" in html, html


def test_sharding_magic_and_replicated_shards(nb):
    assert table(outputs_text(cell_with(nb, "%sharding xr"))) == table(X_NONE)
    assert "16 B on each" not in html_of(cell_with(nb, "%sharding xr"))
    assert "32 B on each" in html_of(cell_with(nb, "%sharding xr"))
    lines = outputs_text(cell_with(nb, "for s in xr.addressable_shards()")).strip().splitlines()
    assert len(lines) == 8
    for k, line in enumerate(lines):
        m = re.fullmatch(r"cpu:(\d) replica (\d) \[(.*)\]", line)
        assert m, line
        assert int(m.group(1)) == k and int(m.group(2)) == k % 2
        rows = k // 2
        want = [float(v) for v in range(8 * rows, 8 * rows + 8)]
        assert [float(v) for v in m.group(3).split(", ")] == want


def test_two_axes_and_replicated_tables(nb):
    text = outputs_text(cell_with(nb, 'P!(("X", "Y"))'))
    assert table(text) == table(XY_ONE_DIM + REPLICATED)


def test_three_dims_cannot_be_drawn(nb):
    (e,) = errors(cell_with(nb, "jnp::zeros(&[2, 2, 2]"))
    assert e.ename == "ValueError"
    assert e.evalue == "`visualize_sharding` only works for shapes with 1 and 2 dimensions."


def test_broadcast_add_propagates(nb):
    text = outputs_text(cell_with(nb, "let add = jit(")).strip()
    assert text.splitlines()[0] == "int32[4@X,1] + int32[1,8@Y] = int32[4@X,8@Y]"
    nums = [int(v) for v in re.findall(r"-?\d+", "\n".join(text.splitlines()[1:]).split("dtype")[0])]
    assert nums == [i + j for i in range(4) for j in range(8)], text


def test_reduction_equals_single_device(nb):
    out = lines(cell_with(nb, "let total = jit("))
    t1, v1 = out[0].split("  ")
    t2, v2 = out[1].split("  ")
    assert (t1, t2) == ("float32[4@Y]", "float32[4]")
    want = [2.0 * sum(r * 4 + c for r in range(8)) for c in range(4)]
    assert [float(v) for v in v1.strip("[]").split(", ")] == want
    assert v1 == v2


def test_ambiguous_contraction_and_out_sharding(nb):
    (e,) = errors(cell_with(nb, "jnp::dot(&x1, &y1)"))
    assert e.ename == "ShardingTypeError"
    assert e.evalue.startswith("Contracting dimensions are sharded and it is ambiguous how the output should be sharded. "
                        "Please specify the output sharding via the `out_sharding` parameter. "
                        "Got lhs_contracting_spec=('X',) and rhs_contracting_spec=('X',)"), e.evalue
    assert lines(cell_with(nb, "dot_out_sharding(&x1")) == ["float32[8@X,16]", "true"]


def test_illegal_result_and_fix(nb):
    (e,) = errors(cell_with(nb, "add.call((&r, &k))"))
    assert e.ename == "ShardingTypeError"
    assert e.evalue.startswith("add operation with inputs: i32[4@X,4], i32[4,4@X] produces an illegally sharded "
                               "result: i32[4@X,4@X]"), e.evalue
    text = outputs_text(cell_with(nb, "let fixed = add.call"))
    assert text.splitlines()[0] == "int32[4@X,4]"
    nums = [int(v) for v in re.findall(r"-?\d+", "\n".join(text.splitlines()[1:]).split("dtype")[0])]
    assert nums == [2 * v for v in range(16)], text


def test_with_sharding_constraint_asserts_on_an_explicit_mesh(nb):
    # JAX 0.10.2, mesh (4, 2) Explicit, k laid out P(None, 'X').
    (e,) = errors(cell_with(nb, 'with_sharding_constraint(&k, P!("X", None))'))
    assert e.ename == "AssertionError", e
    assert e.evalue == ("`with_sharding_constraint` acts as an assert when all axes of mesh are of type `Explicit`. "
                        "The array sharding: P(None, 'X') did not match the sharding provided: P('X', None). "
                        "Please use `jax.sharding.reshard` to shard your input to the sharding you want."), e.evalue


def test_auto_axes(nb):
    # JAX 0.10.2: auto_axes(add)(r, k, out_sharding=P("X", None)) → int32[4@X,4]; inside,
    # the mesh is Auto and the argument's type plain.
    text = lines(cell_with(nb, "let add_auto = auto_axes("))
    assert text[:3] == [
        "inside: AbstractMesh('X': 4, 'Y': 2, axis_types=(Auto, Auto), device_kind=cpu, num_cores=None, platform=cpu)",
        "p inside: int32[4,4]",
        "Result type: int32[4@X,4]",
    ], text
    nums = [int(v) for v in re.findall(r"-?\d+", "\n".join(text[3:]).split("dtype")[0])]
    assert nums == [2 * v for v in range(16)], text


def test_typeof_inside_jit(nb):
    text = lines(cell_with(nb, "let h = jit("))
    assert text == ["x: float32[8@X,4@Y]   sin(x).T: float32[4@Y,8@X]", "ShapedArray(float32[4@Y,8@X])"], text


def test_explicit_axes_in_an_auto_jit(nb):
    # JAX 0.10.2's explicit-sharding page example (mesh (2, 4), Auto), texts as printed there.
    text = lines(cell_with(nb, "let g = explicit_axes("))
    am = "AbstractMesh('X': 2, 'Y': 4, axis_types=({0}, {0}), device_kind=cpu, num_cores=None, platform=cpu)"
    assert text == [
        "mesh inside f: " + am.format("Auto"),
        "mesh inside g: " + am.format("Explicit"),
        "y inside g: ShapedArray(float32[4@X,4@Y])",
        "z after g: ShapedArray(float32[4,4])",
        "float32[4,4]  NamedSharding(mesh=Mesh('X': 2, 'Y': 4, axis_types=(Auto, Auto)), spec=P('X', 'Y'), "
        "memory_kind=device)",
    ], text


def test_in_and_out_shardings(nb):
    text = outputs_text(cell_with(nb, ".in_shardings(vec![Some(P!(\"X\", \"Y\"))])"))
    assert text.splitlines()[0] == "float32[8,4@Y]"
    assert table("\n".join(text.splitlines()[1:])) == table("""
┌───────────┬───────────┐
│           │           │
│           │           │
│           │           │
│           │           │
│CPU 0,2,4,6│CPU 1,3,5,7│
│           │           │
│           │           │
│           │           │
│           │           │
└───────────┴───────────┘""")


def test_inspect_inside_jit(nb):
    text = lines(cell_with(nb, "inspect_array_sharding(&t"))
    assert text[0] == ("inside jit: NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), "
                       "spec=P('Y', 'X'), memory_kind=device)")
    assert text[-1] == "ShapedArray(float32[4@Y,8@X])"


def test_loops_run_per_device(nb):
    # A fori_loop of row block @ replicated weight runs per device, equal to the unsharded call.
    text = lines(cell_with(nb, "let layers = jit("))
    m = re.fullmatch(r"float32\[8@X,4\]  max \|sharded - single\| = (\S+)", text[-1])
    assert m and float(m.group(1)) < 1e-6, text
    text = outputs_text(cell_with(nb, "%compile layers.call"))
    assert "path: partitioned" in text, text
    assert re.search(r"// control flow: scan at .*: runs per device \(its body is shard-local on blocks\)", text), text
    assert "all_gather[" not in text and "dot_general" in text, text
