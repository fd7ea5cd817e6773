"""Front-end errors a fresh user found (issue 5 of session 7), through the real kernel
(jupyter_client) and the real `jaxrepl` binary (pexpect, and a pipe).

- An error returned with `?` from a cell is an error (status error in Jupyter, an error
  block in the terminal) with its type name, text and the user's lines, like a panic.
- `%sharding x x` is a MagicError naming the line and the usage, not rustc's error about
  the magic's generated code; a syntax error in a magic's argument has no note about the
  generated closure.
- A plain cell's iopub traffic leaves no empty `display_data` (finished progress
  displays are cleared when nothing else was shown; that the cell-build progress ends
  before a cell's first printed line is repl/tests/session.rs's test).
- Piped input whose last statement is incomplete reports it instead of dropping it.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import collect, run, kernel  # noqa: F401 (kernel: a module-scoped fixture)
from test_frontend_fixes import ok, text_of
import pexpect
from test_repl_pty import CELL_TIMEOUT_S, START_TIMEOUT_S, expect_prompt, jaxrepl_bin, spawn

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
]

needs_engine = pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                                  reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded")


def failed(reply: dict, outputs: list[dict]) -> str:
    assert reply["status"] == "error", outputs
    errors = [m for m in outputs if m["msg_type"] == "error"]
    assert len(errors) == 1, outputs
    return "\n".join(errors[0]["content"]["traceback"])


@needs_engine
def test_an_error_returned_with_question_mark_is_an_error_with_the_users_line(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let x = jnp::arange(3.0);\nlet g = jit(|x: Array| x.sum_axes(&[1]));",
                         timeout=FIRST_CELL_TIMEOUT)
    defined = ok(reply, outputs)
    # The trace fails with a shape error: its type, text, the traced line and the `?` line.
    reply, outputs = run(kc, "let a = 1;\nlet y = g.call(&x)?;")
    tb = failed(reply, outputs)
    n = reply["execution_count"]
    assert (reply["ename"], reply["evalue"]) == ("ValueError", "sum: axis 1 is out of bounds for array of dimension 1"), reply
    assert f"(traced at cell {defined}, line 2)" in tb, tb
    assert f"(returned by `?` at cell {n}, line 2)" in tb, tb
    assert "`a` (line 1), `y` (line 2) were not kept" in tb, tb
    assert not [m for m in outputs if m["msg_type"] == "stream"], outputs  # shown once, as the error
    # An error with no traced location still names the `?`'s line.
    reply, outputs = run(kc, 'config::update("bogus", true)?;')
    tb = failed(reply, outputs)
    assert reply["ename"] == "ValueError" and 'unknown config flag "bogus"' in reply["evalue"], reply
    assert f"(returned by `?` at cell {reply['execution_count']}, line 1)" in tb, tb
    # A `?` on an error of another type: printed as evcxr prints it, and the cell fails.
    reply, outputs = run(kc, 'let n: i32 = "abc".parse()?;')
    tb = failed(reply, outputs)
    assert reply["ename"] == "ParseIntError", reply  # the type, read from its `{:#?}` text
    assert f"the `?` at cell {reply['execution_count']}, line 1 returned the error printed above; the cell stopped there" in reply["evalue"], reply
    assert "InvalidDigit" in text_of(outputs), outputs
    # The session goes on, with the variables of the cells that succeeded.
    reply, outputs = run(kc, "x.sum()")
    ok(reply, outputs)
    assert "Array(3., dtype=float32)" in text_of(outputs), outputs
    # `{:#?}` of an error printed by the user stays text (it did not stop the cell).
    reply, outputs = run(kc, 'let r = g.call(&x);\neprintln!("{:#?}", r.as_ref().err().unwrap());\n5')
    ok(reply, outputs)
    text = text_of(outputs)
    assert "ValueError: sum: axis 1 is out of bounds" in text and "\x1e" not in text, outputs


@needs_engine
def test_an_err_value_of_a_cell_that_moves_a_variable_is_the_cells_error(kernel):
    # The final expression moves `fs`, defined in the same cell: evcxr's first build fails
    # on it and its second shows the value with Debug (`Err(Error { kind: Value, .. })`).
    # That is still the cell's error, as any `Err(e)` value.
    _, kc = kernel
    reply, outputs = run(kc, "let fs = jit(|(x, y): (Array, Array)| 2 * x + y);\nfs.static_argnums(&[5]).call((7, 8))",
                         timeout=FIRST_CELL_TIMEOUT)
    failed(reply, outputs)
    assert (reply["ename"], reply["evalue"]) == (
        "ValueError", "Jitted function has static_argnums=(5,), but only accepts 2 positional arguments."), reply
    assert "Err(Error" not in text_of(outputs), outputs


def test_magic_argument_errors_name_the_users_line(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let x = 1;\n%sharding x x", timeout=FIRST_CELL_TIMEOUT)
    tb = failed(reply, outputs)
    assert reply["ename"] == "MagicError", reply
    assert "%sharding takes one expression, but line 2 has more: `x x`" in tb, tb
    assert "usage: %sharding X" in tb, tb
    assert "jax::magic" not in tb and "(Array, Array)" not in tb, tb
    reply, outputs = run(kc, "%jaxpr g.call(&x;)")
    tb = failed(reply, outputs)
    assert "cell:1:17" in tb, tb
    assert "closure" not in tb, tb


def test_a_plain_cell_leaves_no_empty_display(kernel):
    _, kc = kernel
    reply, messages = collect(kc, kc.execute("1 + 1"))
    assert reply["content"]["status"] == "ok", messages
    kept = kept_outputs(messages)
    assert [k for k, _ in kept] == ["execute_result"], messages
    assert kept[0][1]["data"]["text/plain"] == "2"


def kept_outputs(messages: list[dict]) -> list[tuple[str, dict]]:
    """What a notebook keeps of a cell's iopub messages: outputs after applying updates and
    clears, as nbclient does."""
    kept = []
    for m in messages:
        kind, c = m["msg_type"], m["content"]
        if kind == "clear_output":
            kept.clear()
        elif kind in ("display_data", "execute_result", "stream", "error"):
            kept.append((kind, c))
        elif kind == "update_display_data":
            for i, (k, old) in enumerate(kept):
                if (old.get("transient") or {}).get("display_id") == c["transient"]["display_id"]:
                    kept[i] = (k, {**old, "data": c["data"]})
    return kept


def test_piped_input_with_an_incomplete_end_reports_it():
    env = dict(os.environ, NO_COLOR="1")
    done = subprocess.run([jaxrepl_bin(), "--no-prelude"], input="let a = 1;\nlet b = (a +\n",
                          capture_output=True, text=True, timeout=START_TIMEOUT_S + CELL_TIMEOUT_S, env=env)
    out = done.stdout + done.stderr
    assert "incomplete input at end of file" in out, out
    assert "    let b = (a +" in out, out
    assert done.returncode == 1, out


def test_piped_input_runs_every_cell_and_exits_1_if_one_failed():
    env = dict(os.environ, NO_COLOR="1")
    run = lambda text: subprocess.run([jaxrepl_bin(), "--no-prelude"], input=text, capture_output=True,
                                      text=True, timeout=START_TIMEOUT_S + 3 * CELL_TIMEOUT_S, env=env)
    done = run("let a = 40;\na + 2\n")
    assert done.returncode == 0 and "42" in done.stdout, done.stdout + done.stderr
    done = run('let n: i32 = "x".parse()?;\nlet c = 3;\nc * 11\n')
    out = done.stdout + done.stderr
    assert "invalid digit found in string" in out, out
    assert "33" in done.stdout, out  # the cells after the failing one still ran
    assert done.returncode == 1, out


def test_the_terminal_shows_a_question_mark_error():
    child = spawn(["--no-prelude"])
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send('let n: i32 = "abc".parse()?;\r')
    child.expect("invalid digit found in string", timeout=CELL_TIMEOUT_S)
    child.expect(r"the `\?` at cell 1, line 1 returned the error printed above", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 2)
    child.send("40 + 2\r")
    child.expect("42", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 3)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)
