"""Defects a fresh user found in the REPL and the kernel (issue 5 of session 6), through the
real kernel (jupyter_client) and the real `jaxrepl` binary (pexpect).

- Errors raised before a primitive is bound (an axis out of range, a matmul shape
  mismatch) name the user's line, also for a function defined in an earlier cell; a
  ShardingTypeError (raised by the partitioner, after tracing) names the line of its
  equation in the earlier cell.
- TracerBoolConversionError names the line of the conversion and, in its message, the line
  of the traced function, as JAX's does.
- A matmul shape mismatch reads like JAX's dot_general error.
- A magic with unbalanced brackets shows the user's line and column and a fix.
- A cell that stops part-way says which of its variables were not kept, and the fix; a
  name it binds again keeps the value an earlier cell gave it (session 14's fresh user).
- In the terminal: cargo's `Compiling` lines never show; lines separated by LF (typed
  ahead, pasted without bracketed paste) each run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pexpect
import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import run, kernel  # noqa: F401 (kernel: a module-scoped fixture)
from test_frontend_fixes import ok, text_of
from test_repl_pty import LINE_START, START_TIMEOUT_S, CELL_TIMEOUT_S, expect_prompt, spawn

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
]

needs_engine = pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                                  reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded")


def failed(reply: dict, outputs: list[dict]) -> str:
    assert reply["status"] == "error", outputs
    return text_of(outputs)


@needs_engine
def test_errors_before_bind_name_the_line_in_the_earlier_cell(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let f = jit(|x: Array| x.sum_axes(&[1]));", timeout=FIRST_CELL_TIMEOUT)
    defined = ok(reply, outputs)
    reply, outputs = run(kc, "f.call(jnp::arange(3.0))")
    tb = failed(reply, outputs)
    assert "ValueError: sum: axis 1 is out of bounds for array of dimension 1" in tb, tb
    assert f"(traced at cell {defined}, line 1)" in tb, tb
    # The function works on a valid input: row sums of [[0,1,2],[3,4,5]].
    reply, outputs = run(kc, "f.call(jnp::reshape(&jnp::arange(6.0), &[2, 3])?)")
    ok(reply, outputs)
    assert "Array([ 3., 12.], dtype=float32)" in text_of(outputs), outputs


@needs_engine
def test_bool_conversion_names_the_if_and_the_function(kernel):
    _, kc = kernel
    code = ("let h = jit(|x: Array| -> Result<Array> {\n"
            "    let y = x.sin();\n"
            "    if y.sum().gt(0.0).to_bool()? { Ok(y) } else { Ok(x) }\n"
            "});")
    reply, outputs = run(kc, code, timeout=FIRST_CELL_TIMEOUT)
    defined = ok(reply, outputs)
    reply, outputs = run(kc, "h.call(&jnp::arange(3.0))")
    tb = failed(reply, outputs)
    assert reply["ename"] == "TracerBoolConversionError", reply
    assert f"(traced at cell {defined}, line 3)" in tb, tb
    assert f"while tracing the function <lambda> at cell {defined}, line 1 for jit" in tb, tb


@needs_engine
def test_matmul_mismatch_is_jaxs_dot_general_error_at_the_line(kernel):
    _, kc = kernel
    code = "let a = jnp::ones(&[3, 4], None);\nlet b = jnp::ones(&[5, 6], None);\njnp::matmul(&a, &b)"
    reply, outputs = run(kc, code, timeout=FIRST_CELL_TIMEOUT)
    tb = failed(reply, outputs)
    assert ("TypeError: dot_general requires contracting dimensions to have the same shape, "
            "got (4,) and (5,).") in tb, tb
    assert f"(traced at cell {reply['execution_count']}, line 3)" in tb, tb


@needs_engine
def test_unbalanced_magic_shows_the_users_line_and_a_fix(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let x = jnp::arange(3.0);\n%jaxpr f.call(x", timeout=FIRST_CELL_TIMEOUT)
    tb = failed(reply, outputs)
    assert reply["ename"] == "MagicError", reply
    assert "the `(` at line 2, column 14 is never closed" in tb, tb
    assert "2 | %jaxpr f.call(x\n" in tb and "--> cell:2:14" in tb, tb
    assert "fix: `%jaxpr f.call(x)`" in tb, tb
    assert "jax::magic" not in tb and "||" not in tb, tb


@needs_engine
def test_a_cell_that_stops_early_names_the_variables_it_did_not_keep(kernel):
    _, kc = kernel
    code = ("let keep1 = 1;\n"
            "let keep2 = jnp::arange(2.0);\n"
            "let bad = jnp::ones(&[3], None) + jnp::ones(&[4], None);")
    reply, outputs = run(kc, code, timeout=FIRST_CELL_TIMEOUT)
    tb = failed(reply, outputs)
    assert reply["ename"] == "TypeError", reply
    assert "This cell's variables `keep1` (line 1), `keep2` (line 2), `bad` (line 3) were not kept" in tb, tb
    assert "Fix: put the failing statement in its own cell" in tb, tb
    reply, outputs = run(kc, "keep1")
    assert reply["status"] == "error", outputs  # indeed not kept
    # `?` on an Err: the error (test_frontend_errors.py), and the cell's variables are dropped.
    reply, outputs = run(kc, "let q1 = 5;\nlet q2 = jnp::sum(&jnp::arange(3.0), Some(&[4]))?;")
    tb = failed(reply, outputs)
    assert reply["ename"] == "ValueError", reply
    assert "sum: axis 4 is out of bounds" in tb, tb
    assert "`q1` (line 1), `q2` (line 2) were not kept" in tb, tb
    # The fix works: the statement that succeeds in its own cell keeps its variable.
    reply, outputs = run(kc, "let keep1 = 1;")
    ok(reply, outputs)
    reply, outputs = run(kc, "keep1 + 41")
    ok(reply, outputs)
    assert "42" in text_of(outputs), outputs


@needs_engine
def test_a_failed_cell_leaves_the_earlier_value_of_a_name_it_binds_again(kernel):
    # Found by a fresh user (session 14): evcxr dropped every name a failing cell bound
    # again, so the earlier cells' `v` and `x` were gone. The engine keeps them aside at
    # the cell's start (moved, or cloned when the cell reads them first) and the session
    # binds them again after the failure.
    _, kc = kernel
    reply, outputs = run(kc, 'let rv = 1i32;\nlet rx = jnp::arange(4.0);\nlet rs = String::from("old");',
                         timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    reply, outputs = run(kc, 'let rv = 2i32;\nlet rx = &rx * 10.0;\nlet rs = rs + "!";\nlet nope: i32 = "x".parse()?;')
    tb = failed(reply, outputs)
    assert "This cell's variable `nope` (line 4) was not kept; `rv` (line 1), `rx` (line 2), `rs` (line 3) keep their " \
           "value from before the cell" in tb, tb
    reply, outputs = run(kc, 'println!("{rv} {:?} {rs}", rx.to_vec::<f32>()?);')
    ok(reply, outputs)
    assert "1 [0.0, 1.0, 2.0, 3.0] old" in text_of(outputs), outputs
    # A panic, too; and the value is the earlier one even though the cell moved it.
    reply, outputs = run(kc, "let rx = rx * 2.0;\nlet rv = rv + 1;\npanic!(\"boom\");")
    tb = failed(reply, outputs)
    assert "`rx` (line 1), `rv` (line 2) keep their value from before the cell" in tb, tb
    reply, outputs = run(kc, 'println!("{rv} {}", rx.sum().item::<f32>()?);')
    ok(reply, outputs)
    assert "1 6" in text_of(outputs), outputs
    # A type without Clone that the cell reads first cannot be kept: the note says so.
    reply, outputs = run(kc, "struct Nc(i32);\nlet rn = Nc(1);")
    ok(reply, outputs)
    reply, outputs = run(kc, 'let rn = Nc(rn.0 + 1);\nlet bad: i32 = "q".parse()?;')
    tb = failed(reply, outputs)
    assert "`rn` (line 1) lost its value from before the cell too" in tb, tb
    # ... but one the cell does not read first is moved aside and comes back.
    reply, outputs = run(kc, "let rn = Nc(7);")
    ok(reply, outputs)
    reply, outputs = run(kc, 'let rn = Nc(8);\nlet bad: i32 = "q".parse()?;')
    tb = failed(reply, outputs)
    assert "`rn` (line 1) keeps its value from before the cell" in tb, tb
    reply, outputs = run(kc, 'println!("rn = {}", rn.0);')
    ok(reply, outputs)
    assert "rn = 7" in text_of(outputs), outputs
    # A cell that succeeds binds the new values, as always.
    reply, outputs = run(kc, 'let rv = 5i32;\nlet rx = rx + 1.0;')
    ok(reply, outputs)
    reply, outputs = run(kc, 'println!("{rv} {:?}", rx.to_vec::<f32>()?);')
    ok(reply, outputs)
    assert "5 [1.0, 2.0, 3.0, 4.0]" in text_of(outputs), outputs


@needs_engine
def test_sharding_type_error_names_the_line_in_the_earlier_cell(kernel):
    _, kc = kernel
    setup = ('config::update_int("jax_num_cpu_devices", 8)?;\n'
             'let mesh = make_mesh(&[4, 2], &["X", "Y"], None)?;\n'
             "let h16 = Array::from_vec((0..16).collect::<Vec<i32>>(), &[4, 4])?;\n"
             'let xs = device_put(&h16, NamedSharding::new(&mesh, P!("X", None))?)?;\n'
             'let ys = device_put(&h16, NamedSharding::new(&mesh, P!(None, "X"))?)?;')
    reply, outputs = run(kc, setup, timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    reply, outputs = run(kc, "let add = jit(|(p, q): (Array, Array)| {\n    &p + &q\n});")
    defined = ok(reply, outputs)
    reply, outputs = run(kc, "add.call((&xs, &ys))")
    tb = failed(reply, outputs)
    assert reply["ename"] == "ShardingTypeError", reply
    assert "produces an illegally sharded result: i32[4@X,4@X]" in tb, tb
    assert f"(traced at cell {defined}, line 2)" in tb, tb


@pytest.fixture(scope="module")
def private_cache():
    d = tempfile.mkdtemp(prefix="jaxrepl-fresh-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_lf_separated_lines_each_run_and_cargo_stays_quiet(private_cache):
    # A tiny local crate for `:dep`: cargo builds it in this private slot, which used to
    # print `Compiling tiny_dep v0.1.0 (...)` into the terminal.
    crate = os.path.join(private_cache, "tiny_dep")
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "tiny_dep"\nversion = "0.1.0"\nedition = "2021"\n[lib]\npath = "src/lib.rs"\n')
    with open(os.path.join(crate, "src", "lib.rs"), "w") as f:
        f.write("pub fn answer() -> i32 { 42 }\n")
    child = spawn(["--no-prelude"], cache=private_cache)
    seen = []
    child.logfile_read = type("Tee", (), {"write": lambda _s, t: (seen.append(t), sys.stdout.write(t)),
                                          "flush": lambda _s: sys.stdout.flush()})()
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    # Two cells sent at once, separated by LF (Ctrl-J), as a paste without bracketed paste.
    child.send("let a = 1;\nlet b = 2;\n")
    expect_prompt(child, 3, timeout=START_TIMEOUT_S)
    child.send("a + b\r")
    child.expect(LINE_START + r"3\r\n", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 4)
    child.send(':dep tiny_dep = { path = "%s" }\r' % crate)
    expect_prompt(child, 5, timeout=START_TIMEOUT_S)
    child.send("tiny_dep::answer() + a\r")
    child.expect(LINE_START + r"43\r\n", timeout=START_TIMEOUT_S)
    expect_prompt(child, 6)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)
    text = "".join(seen)
    assert "Compiling" not in text, text


@needs_engine
def test_jitted_and_grad_closures_returning_ok_show_the_array_or_the_error(kernel):
    """A closure returning `Ok(..)` (its error type inferred from `TraceOutput`): the call's
    `Result<Array>` shows as the array (text and HTML), or as the session's error, never as
    `Ok(Array(..))` / `Err(Error { .. })` (Debug)."""
    _, kc = kernel
    reply, outputs = run(kc, "let f = jit(|x: Array| Ok(x.sin()));", timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    for code, want in [
        ("f.call(&jnp::arange(3.0))", "Array([0.        , 0.84147096, 0.9092974 ], dtype=float32)"),
        ("let g = jit(|x: Array| Ok(x.sin()));\ng.call(&jnp::arange(3.0))",
         "Array([0.        , 0.84147096, 0.9092974 ], dtype=float32)"),
        ("grad(|x: Array| Ok(x.sin().sum()))(jnp::arange(3.0))",
         "Array([ 1.        ,  0.5403023 , -0.41614684], dtype=float32)"),
    ]:
        reply, outputs = run(kc, code)
        ok(reply, outputs)
        results = [m for m in outputs if m["msg_type"] == "execute_result"]
        assert len(results) == 1, outputs
        data = results[0]["content"]["data"]
        assert data["text/plain"] == want, (code, data)
        assert "<table" in data.get("text/html", ""), (code, data)
    code = "let h = jit(|x: Array| Ok(jnp::matmul(&x, &jnp::ones(&[5, 6], None))?));\nh.call(&jnp::ones(&[3, 4], None))"
    reply, outputs = run(kc, code)
    tb = failed(reply, outputs)
    assert reply["ename"] == "TypeError", reply
    assert ("TypeError: dot_general requires contracting dimensions to have the same shape, "
            "got (4,) and (5,).") in tb, tb
    assert f"(traced at cell {reply['execution_count']}, line 1)" in tb, tb
    assert "Err(" not in tb and "Error {" not in tb, tb
