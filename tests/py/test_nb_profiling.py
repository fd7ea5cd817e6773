"""201-08-profiling: benchmarking magics, a Chrome trace written in JAX's layout (read back
here and checked event by event), %profile's table and SVG timeline, named_scope in the
lowered module, the device memory profile."""
import gzip
import json
import os
import re
import tempfile

import pytest

from test_notebooks import cell_with, outputs_text, run_notebook
# The checks every notebook gets, on this module's `nb`.
from test_notebooks import test_every_code_cell_ran, test_only_tagged_cells_raise  # noqa: F401

NAME = "201-08-profiling"


@pytest.fixture(scope="module")
def nb(jaxrepl_kernelspec):
    return run_notebook(NAME, jaxrepl_kernelspec)


def rich(cell, mime):
    return [o["data"][mime] for o in cell.get("outputs", [])
            if o.get("output_type") in ("execute_result", "display_data") and mime in o.get("data", {})]


def test_input_shape(nb):
    assert outputs_text(cell_with(nb, "let x = random::normal")).strip() == "[500, 500]"


def test_time_and_timeit(nb):
    times = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%time f.call")]
    assert len(times) == 2
    for c in times:
        assert re.fullmatch(r"Wall time: [\d.]+ (s|ms|µs|ns)", outputs_text(c).strip()), outputs_text(c)
    timeit = r"[\d.]+ (s|ms|µs|ns) ± [\d.]+ (s|ms|µs|ns) per loop \(mean ± std\. dev\. of 7 runs, [\d,]+ loops? each\)"
    for needle in ["%timeit f.call(&x)", "%timeit x.t()"]:
        text = outputs_text(cell_with(nb, needle)).strip()
        assert re.fullmatch(timeit, text), text


def test_trace_file_in_jax_layout_with_engine_events(nb):
    rel = outputs_text(cell_with(nb, "profiler::trace(&dir")).strip()
    assert re.fullmatch(r"plugins/profile/\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d/[^/]+\.trace\.json\.gz", rel), rel
    path = os.path.join(os.environ.get("TMPDIR", tempfile.gettempdir()), "jaxrepl-profile-demo", rel)
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    def named(n):
        return [e for e in events if e["name"] == n]
    assert len(named("PjitFunction(g)")) == 3
    assert len(named("compile jit(g)")) == 1 and len(named("trace jit(g)")) == 1
    assert len(named("jit(g)")) == 3
    steps = named("train_step")
    assert [e["args"]["step_num"] for e in steps] == ["0", "1", "2"]
    # Each step's jitted call lies inside the step's annotation.
    for s, c in zip(steps, named("PjitFunction(g)")):
        assert s["ts"] <= c["ts"] and c["ts"] + c["dur"] <= s["ts"] + s["dur"] + 1e-3, (s, c)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in trace["traceEvents"])


def table_rows(text):
    rows = {}
    for line in text.splitlines()[1:]:
        m = re.match(r"(\w+)\s+(.+?)\s+(\d+)\s+[\d.]+ \S+\s+[\d.]+ \S+\s+[\d.]+%$", line)
        if m:
            rows[(m.group(1), m.group(2))] = int(m.group(3))
    return rows


def test_summary_table_counts_calls(nb):
    rows = table_rows(outputs_text(cell_with(nb, "summary_table(&p)")))
    assert rows[("jit", "PjitFunction(g)")] == 3, rows
    assert rows[("execute", "jit(g)")] == 3, rows
    assert rows[("compile", "compile jit(g)")] == 1, rows
    assert rows[("user", "train_step")] == 3, rows


def test_profile_magic_svg_and_table(nb):
    first, second = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%profile")]
    svg = rich(first, "image/svg+xml")
    assert svg and svg[0].lstrip().startswith("<svg") and "<rect" in svg[0] and "PjitFunction(h)" in svg[0], svg[:1]
    rows = table_rows(outputs_text(first))
    assert rows[("compile", "compile jit(h)")] == 1 and rows[("execute", "jit(h)")] == 1, rows
    rows = table_rows(outputs_text(second))
    assert ("compile", "compile jit(h)") not in rows and rows[("execute", "jit(h)")] == 1, rows
    assert rich(second, "image/svg+xml")


# jax 0.10.2: jax.jit(g).lower(x).as_text(debug_info=True) with `with jax.named_scope("my_scope")`
# locates the ops at "jit(g)/my_scope/sin" and "jit(g)/my_scope/mul".
def test_named_scope_locations_and_unchanged_jaxpr(nb):
    text = outputs_text(cell_with(nb, "k.lower(&small)"))
    assert 'loc("jit(k)/my_scope/sin")' in text and 'loc("jit(k)/my_scope/mul")' in text, text
    # jax 0.10.2: make_jaxpr of the same function (the scope is not an equation).
    jaxpr = "{ lambda ; a:f32[4]. let b:f32[4] = sin a; c:f32[4] = mul b 2.0:f32[] in (c,) }"
    assert outputs_text(cell_with(nb, "make_jaxpr(|x: Array| named_scope")).strip() == jaxpr


def test_device_memory_profile_and_memory_magic(nb):
    text = outputs_text(cell_with(nb, "device_memory_profile()"))
    # h's 500x500 f32 output: 1,000,000 bytes in the 1 MiB size class.
    assert re.search(r"^1048576 1 jit\(h\)$", text, re.M), text
    mem = outputs_text(cell_with(nb, "%memory"))
    assert "bytes_in_use" in mem and re.search(r"^jit\(h\)\s+1\s+1\.00 MiB$", mem, re.M), mem
