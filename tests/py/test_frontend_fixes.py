"""Front-end defects a fresh user found, through the kernel.

Engine locations name the user's cell and line (`cell N, line L`, N = the execution
count), never evcxr's generated `src/lib.rs`: the `traced at` line of errors, `%eqn-count`
rows, the unrolled-loop warning, `%explain`, the jdb header and its `l` command, the line a
jax_debug_nans error names, and panics. A function defined in one cell keeps that cell's
number when a later cell traces it. Compile errors keep the cell's own line numbers.
Completion inserts a function's name and `(`, never its parameter names; an undefined `s`
is reported as undefined (not as "found macro"); `%help` is aligned."""

from __future__ import annotations

import os
import re
import time

import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import CELL_TIMEOUT, collect, kernel, run  # noqa: F401 (kernel: a module-scoped fixture)

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
    pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                       reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded"),
]

BODY = """fn body(x: Array) -> Array {
    let mut y = x;
    for _ in 0..120 { y = y.sin(); }
    y * 2.0
}"""


def text_of(outputs: list[dict]) -> str:
    """Everything a user sees: streams, results/displays (text/plain) and tracebacks."""
    parts = []
    for m in outputs:
        c = m["content"]
        if m["msg_type"] == "stream":
            parts.append(c["text"])
        elif m["msg_type"] in ("execute_result", "display_data"):
            parts.append(c["data"].get("text/plain", ""))
        elif m["msg_type"] == "error":
            parts.extend(c["traceback"])
    return "\n".join(parts)


def ok(reply: dict, outputs: list[dict]) -> int:
    assert reply["status"] == "ok", (reply, outputs)
    return reply["execution_count"]


def test_locations_name_the_cell_and_line(kernel):
    _, kc = kernel
    reply, outputs = run(kc, BODY, timeout=FIRST_CELL_TIMEOUT)
    body_cell = ok(reply, outputs)
    reply, outputs = run(kc, "let f = jit(body);\nlet x = jnp::arange(3.0);")
    ok(reply, outputs)
    reply, outputs = run(kc, "%eqn-count f.call(&x)")
    ok(reply, outputs)
    seen = text_of(outputs)
    assert "src/lib.rs" not in seen, seen
    # 120 sin equations on the loop's line, the multiply on the next: rows `count share  line`.
    assert re.search(rf"^\s+120\s+[\d.]+%\s+cell {body_cell}, line 3$", seen, re.M), seen
    assert re.search(rf"^\s+1\s+[\d.]+%\s+cell {body_cell}, line 4$", seen, re.M), seen
    # The unrolled-loop warning names the same line (printed when f is first traced).
    assert f"staged 120 of its 121 equations at cell {body_cell}, line 3:" in seen, seen

    reply, outputs = run(kc, "%explain")
    ok(reply, outputs)
    seen = text_of(outputs)
    assert "src/lib.rs" not in seen and "cell " in seen, seen

    code = "let g = jit(|x: Array| {\n    let y = x.sin();\n    y + jnp::ones(&[5], None)\n});\ng.call(&jnp::arange(3.0))"
    reply, outputs = run(kc, code)
    assert reply["status"] == "error", outputs
    tb = text_of(outputs)
    assert f"(traced at cell {reply['execution_count']}, line 3)" in tb, tb

    code = """let nan_guard = debug_nans(true);
let h = jit(|x: Array| {
    let w = x.clone() * x * -3.0;
    w.log()
});
let r = h.call(&Array::scalar(5.0f32));
drop(nan_guard);
r"""
    reply, outputs = run(kc, code)
    assert (reply["status"], reply["ename"]) == ("error", "FloatingPointError"), outputs
    tb = text_of(outputs)
    assert f"(traced at cell {reply['execution_count']}, line 4)" in tb, tb

    reply, outputs = run(kc, 'let v: Vec<i32> = vec![];\nlet w = v[3];')
    assert reply["status"] == "error", outputs
    assert f"panicked at cell {reply['execution_count']}, line 2" in text_of(outputs), text_of(outputs)


def test_jdb_header_and_list_show_the_cell_line(kernel):
    _, kc = kernel
    code = """let bp2 = jit(|x: Array| {
    let y = x.cos();
    debug::breakpoint!(x, y)?;
    Ok::<_, Error>(y * 2.0)
});
bp2.call(Array::scalar(2.0f32))"""
    msg_id = kc.execute(code, allow_stdin=True)
    for command in ["l", "w", "c"]:
        request = kc.get_stdin_msg(timeout=FIRST_CELL_TIMEOUT)
        assert request["msg_type"] == "input_request", request
        kc.input(command)
    reply, messages = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok", reply
    n = reply["content"]["execution_count"]
    text = "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")
    lines = text.splitlines()
    assert lines[:4] == ["Entering jdb:", f"> cell {n}, line 3", "   3 ->     debug::breakpoint!(x, y)?;",
                         f"> cell {n}, line 3"], text


def test_compile_errors_keep_the_cells_line_numbers(kernel):
    _, kc = kernel
    reply, outputs = run(kc, 'let fine = 1;\nlet broken: i32 = "text";')
    assert reply["status"] == "error"
    tb = outputs[0]["content"]["traceback"]
    assert any("--> cell:2:" in line for line in tb), tb
    assert any(line.startswith("2 | let broken") for line in tb), tb


def test_an_undefined_value_named_like_a_prelude_macro(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let t = s + 1;")
    assert reply["status"] == "error"
    err = outputs[0]["content"]
    assert err["evalue"] == "cannot find value `s` in this scope", err
    assert any("no value `s` is defined in this cell or an earlier one" in line for line in err["traceback"]), err


def test_completion_inserts_no_parameter_names(kernel):
    _, kc = kernel
    assert run(kc, "let xs = jnp::arange(4.0);")[0]["status"] == "ok"
    code = "xs.resh"
    # rust-analyzer answers once it has loaded the session's crates: ask a few times.
    for _ in range(5):
        msg_id = kc.complete(code, len(code))
        reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        matches = reply["content"]["matches"]
        if matches:
            break
        time.sleep(2)
    assert matches, reply["content"]
    # rust-analyzer's `reshape(${1:shape})$0` becomes `reshape(`.
    assert not [m for m in matches if re.search(r"\(\s*[A-Za-z_]", m)], matches
    assert "reshape(" in matches, matches


def test_help_is_aligned(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "%help")
    assert reply["status"] == "ok"
    text = "\n".join(m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] in ("execute_result", "display_data"))
    starts = []
    for line in text.splitlines():
        m = re.match(r"^  (%\S+(?: \S+)?)(\s{2,}|\s(?=\S))", line)
        if m and len(m.group(1)) <= 15:
            starts.append((line, m.end()))
    assert len(starts) >= 10, text
    assert {c for _, c in starts} == {18}, starts


def test_a_final_expression_that_moves_a_variable_shows_the_value(kernel):
    # evcxr falls back to Debug formatting when the final expression moves a variable; the
    # value still shows as itself (the jaxpr text, the Array), not `Ok(ClosedJaxpr { .. })`.
    _, kc = kernel
    reply, outputs = run(kc, 'let xm = jnp::arange(8.0);\nlet dbl = jit(|a: Array| a * 2.0);\n'
                             'make_jaxpr(move |a: Array| dbl.call(a), &xm)')
    ok(reply, outputs)
    text = text_of(outputs)
    assert text == "{ lambda ; a:f32[8]. let b:f32[8] = mul a 2.0:f32[] in (b,) }", text
    reply, outputs = run(kc, 'let wm = jnp::arange(3.0);\njit(|a: Array| a * 2.0).call(wm)')
    ok(reply, outputs)
    assert text_of(outputs) == "Array([0., 2., 4.], dtype=float32)", text_of(outputs)
