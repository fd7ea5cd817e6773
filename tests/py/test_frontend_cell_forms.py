"""Cell forms a user meets in both front ends (issue 5, front ends), through the real kernel
(jupyter_client) and the real `jaxrepl` binary (pexpect, a pipe):

- a cell that starts with evcxr `:` commands (`:timing`) keeps `?` errors as errors, and its
  compile errors keep the cell's line numbers;
- a cell that ends inside a bracket is an `IncompleteInput` error naming the user's
  delimiter, not rustc's "mismatched closing delimiter" at the session's wrapper;
- the lines after a magic run as Rust after the magic's output;
- a `?` on a non-engine error is named by the error's type (`ParseIntError`);
- `dbg!` shows `[cell N, line L]`, not evcxr's `[src/lib.rs:..]`;
- at a dumb terminal (TERM=dumb: no raw mode) Ctrl-C in a continuation line discards the
  pending lines, as it does at the full prompt;
- a variable that a cell moves (evcxr drops it silently) is named in a note with the line
  that took it and the fix;
- a CALL magic given two expressions (`%cost 3 4`) is a MagicError with its usage, not
  rustc's error about the generated closure; a magic whose expression does not compile says
  that the Rust above it did not run either.
"""

from __future__ import annotations

import os
import re
import subprocess

import pexpect
import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import run, kernel  # noqa: F401 (kernel: a module-scoped fixture)
from test_frontend_fixes import ok, text_of
from test_repl_pty import CELL_TIMEOUT_S, ENGINE_TIMEOUT_S, LINE_START, ROOT, START_TIMEOUT_S, expect_prompt, jaxrepl_bin, spawn

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
]

needs_engine = pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                                  reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded")


def the_error(reply: dict, outputs: list[dict]) -> dict:
    assert reply["status"] == "error", outputs
    errors = [m["content"] for m in outputs if m["msg_type"] == "error"]
    assert len(errors) == 1, outputs
    return errors[0]


def test_a_cell_with_evcxr_commands_keeps_question_mark_errors_and_lines(kernel):
    _, kc = kernel
    reply, outputs = run(kc, ':timing\nlet n: i32 = "abc".parse()?;\nprintln!("after {n}");',
                         timeout=FIRST_CELL_TIMEOUT)
    e = the_error(reply, outputs)
    n = reply["execution_count"]
    assert e["ename"] == "ParseIntError", e
    assert f"the `?` at cell {n}, line 2 returned the error printed above; the cell stopped there" == e["evalue"], e
    assert "after" not in text_of(outputs), outputs
    # A compile error in such a cell is on the user's line (the session's line is not counted).
    reply, outputs = run(kc, ':timing\n\nlet y: i32 = "a";')
    e = the_error(reply, outputs)
    assert e["ename"] == "CompileError" and " --> cell:3:14" in e["traceback"], e
    reply, outputs = run(kc, ":timing")  # commands only: still fine
    ok(reply, outputs)


@needs_engine
def test_a_moved_variable_is_named_with_the_fix(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let kept = jnp::arange(3.0);\nlet moved = jnp::arange(4.0);", timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    reply, outputs = run(kc, "fn take(a: Array) -> Array { a * 2.0 }\nlet n = 1;\nlet doubled = take(moved);\ndoubled")
    ok(reply, outputs)
    seen = text_of(outputs)
    assert "Array([0., 2., 4., 6.], dtype=float32)" in seen, outputs
    notes = [m["content"]["text"] for m in outputs if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"]
    assert notes == ["note: `moved` was moved by this cell (line 3) and is no longer defined; to keep it, pass `&moved` or `moved.clone()` instead\n"], outputs
    # The variable is really gone, and the one not moved is kept (no note for it).
    reply, outputs = run(kc, "kept.shape().to_vec()")
    ok(reply, outputs)
    assert "stderr" not in str(outputs) and "[3]" in text_of(outputs), outputs
    reply, outputs = run(kc, "moved")
    assert reply["status"] == "error", outputs


def test_a_call_magic_given_two_expressions_is_a_magic_error(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "%cost 3 4", timeout=FIRST_CELL_TIMEOUT)
    e = the_error(reply, outputs)
    assert e["ename"] == "MagicError", e
    assert e["evalue"] == "%cost takes one expression (a call), but line 1 has more: `3 4` (a second one starts at `4`)\nusage: %cost CALL, e.g. `%cost f.call(&x)`", e
    # Rust above a magic whose expression does not compile did not run: the error says so.
    reply, outputs = run(kc, "let above = 5;\n%cost no_such_function(above)")
    e = the_error(reply, outputs)
    assert e["ename"] == "CompileError", e
    assert e["traceback"][-1].startswith("note: nothing in this cell ran: the Rust above the magic (lines 1-1) compiles together with it"), e


def test_an_unclosed_bracket_names_the_users_delimiter(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let v = vec![1, 2;", timeout=FIRST_CELL_TIMEOUT)
    e = the_error(reply, outputs)
    assert e["ename"] == "IncompleteInput", e
    assert e["evalue"].startswith("unclosed `[` opened at cell line 1, column 13"), e
    assert e["traceback"][1:5] == [" --> cell:1:13", "  |", "1 | let v = vec![1, 2;", "  |             ^ unclosed `[`"], e
    assert "mismatched closing delimiter" not in "\n".join(e["traceback"]), e
    reply, outputs = run(kc, "let a = 1;\nfn f() {\n    let t = (a, 2;")
    e = the_error(reply, outputs)
    assert e["evalue"].startswith("unclosed `(` opened at cell line 3, column 13 (inside the unclosed `{` at line 2, column 8)"), e
    # A closer that does not match stays rustc's error, on the user's lines.
    reply, outputs = run(kc, "fn g() {\n    let b = (1, 2;\n}")
    e = the_error(reply, outputs)
    assert e["ename"] == "CompileError" and "mismatched closing delimiter" in e["evalue"], e


def test_piped_cells_ended_inside_a_bracket_name_the_delimiter():
    env = dict(os.environ, NO_COLOR="1")
    done = subprocess.run([jaxrepl_bin(), "--no-prelude"], input="let v = vec![1, 2;\n\n\n40 + 2\nlet w = (1,\n",
                          capture_output=True, text=True, timeout=START_TIMEOUT_S + 3 * CELL_TIMEOUT_S, env=env)
    out = done.stdout + done.stderr
    assert "IncompleteInput: unclosed `[` opened at cell line 1, column 13" in out, out
    assert "42" in done.stdout, out
    # At the end of the input: the same naming of the delimiter.
    assert "incomplete input at end of file" in out and "unclosed `(` opened at cell line 1, column 9" in out, out
    assert done.returncode == 1, out


@needs_engine
def test_lines_after_a_magic_run_after_it(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let f = jit(|x: Array| x.sin());\nlet x = jnp::ones(&[2], None);", timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    reply, outputs = run(kc, '%jaxpr f.call(&x)\nprintln!("second");\nlet z = 5;\nz + 1')
    ok(reply, outputs)
    kinds = [(m["msg_type"], m["content"].get("name")) for m in outputs]
    assert kinds == [("display_data", None), ("stream", "stdout"), ("execute_result", None)], outputs
    assert outputs[0]["content"]["data"]["text/plain"].startswith("{ lambda ; a:f32[2]. let b:f32[2] = sin a in (b,) }"), outputs
    assert outputs[1]["content"]["text"] == "second\n"
    assert outputs[2]["content"]["data"]["text/plain"] == "6"
    # The variables of the lines after the magic are kept; their errors keep the cell's lines.
    reply, outputs = run(kc, "z * 2")
    assert ok(reply, outputs) and "10" in text_of(outputs)
    reply, outputs = run(kc, "%explain\n\nlet w = oops;")
    e = the_error(reply, outputs)
    assert e["ename"] == "CompileError" and " --> cell:3:9" in e["traceback"], e
    assert "3 | let w = oops;" in e["traceback"], e
    # A failing magic stops the cell: the lines after it do not run.
    reply, outputs = run(kc, '%jaxpr 1 + 1\nprintln!("not run");')
    e = the_error(reply, outputs)
    assert "made no jitted call" in e["evalue"] and "not run" not in text_of(outputs), outputs
    # Several magics in one cell run in order, as IPython runs every line magic of a cell.
    reply, outputs = run(kc, "%jaxpr f.call(&x)\n%jaxpr f.call(&x)\nlet k = 2;\nk")
    ok(reply, outputs)
    assert [m["msg_type"] for m in outputs] == ["display_data", "display_data", "execute_result"], outputs
    assert all(m["content"]["data"]["text/plain"].startswith("{ lambda ; a:f32[2].") for m in outputs[:2]), outputs
    assert outputs[2]["content"]["data"]["text/plain"] == "2"
    # A magic's argument error names its line and the magic's usage.
    reply, outputs = run(kc, "%jaxpr f.call(&x)\n\n%explain now")
    e = the_error(reply, outputs)
    assert e["ename"] == "MagicError" and "(line 3)" in e["evalue"] and "usage: %explain" in e["evalue"], e


def test_dbg_names_the_cells_line(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let a = 3;\nlet q = dbg!(a + 4);", timeout=FIRST_CELL_TIMEOUT)
    n = ok(reply, outputs)
    err = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
    assert err == f"[cell {n}, line 2] a + 4 = 7\n", outputs


@needs_engine
def test_the_terminal_names_dbg_and_question_mark_types():
    # With the engine: the session's error format is `{:#?}`, which names the error's type.
    child = spawn([], env_extra={"JAXREPL_ENGINE_DIR": os.path.join(ROOT, "engine")})
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send("let q = dbg!(6 * 7);\r")
    child.expect(LINE_START + r"\[cell 1, line 1\] 6 \* 7 = 42\r\n", timeout=ENGINE_TIMEOUT_S)
    expect_prompt(child, 2)
    child.send('let n: u8 = "300".parse()?;\r')
    child.expect(r"ParseIntError: the `\?` at cell 2, line 1 returned the error printed above", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 3)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)


@pytest.mark.parametrize("term", ["dumb", "xterm"])
def test_ctrl_c_in_a_continuation_line_discards_the_pending_input(term):
    child = spawn(["--no-prelude"], env_extra={"TERM": term})
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send("fn add(a: i32) -> i32 {\r")
    child.send("    a +\r")
    if term == "dumb":
        child.expect(r"\.\.\.: ", timeout=CELL_TIMEOUT_S)
    child.send("\x03")
    expect_prompt(child, 1)
    # The pending lines are gone: a new cell runs alone, and `add` was never defined.
    child.send("40 + 2\r")
    child.expect(LINE_START + r"42\r\n", timeout=START_TIMEOUT_S)
    expect_prompt(child, 2)
    child.send("add(1)\r")
    child.expect(r"cannot find function `add`", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 3)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
