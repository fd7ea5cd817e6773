"""Front-end defects a fresh user found (second round), through the kernel.

- Locations in a cell whose statements share a line (`let f = jit(..); f.call(..)`, which
  evcxr splits into lines of its own and whose final expression it wraps for display)
  read `cell N, line L`: `%explain`, the jdb header, an operator's panic, and the
  TracerBoolConversionError line "while tracing the function <lambda> at cell N, line L for jit"
  (and "for grad" under `grad`).
- A magic line after Rust statements runs after them; a compile error in a magic's argument
  shows the user's line and column, not the generated call.
- Completion: `jnp::ta` offers `jnp::tan`; nothing after a `.` is a keyword.
- A stack overflow is reported as one (`StackOverflow`, with the lost variables and the
  fix), once: later cells run normally and do not repeat it.
"""

from __future__ import annotations

import os
import time

import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import CELL_TIMEOUT, collect, kernel, run  # noqa: F401 (kernel: a module-scoped fixture)
from test_frontend_fixes import ok, text_of

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
    pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                       reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded"),
]


def test_statements_sharing_a_line_are_located_in_the_cell(kernel):
    _, kc = kernel
    # The first engine cell of the session: a closure and the final expression on one line.
    reply, outputs = run(kc, "let f1 = jit(|x: Array| Ok(x.sin())); f1.call(jnp::arange(3.0))",
                         timeout=FIRST_CELL_TIMEOUT)
    n = ok(reply, outputs)
    reply, outputs = run(kc, "%explain")
    ok(reply, outputs)
    seen = text_of(outputs)
    assert "src/lib.rs" not in seen, seen
    assert f"TRACING CACHE MISS at cell {n}, line 1:" in seen, seen
    assert f"defined at cell {n}, line 1" in seen, seen

    reply, outputs = run(kc, "let x = jnp::arange(3.0); let w = jnp::arange(4.0); &x + &w")
    assert (reply["status"], reply["ename"]) == ("error", "TypeError"), outputs
    seen = text_of(outputs)
    # rustc places the operator at the `(` evcxr wraps the final expression in.
    assert f"(at cell {reply['execution_count']}, line 1)" in seen, seen
    assert "panicked" not in seen, seen  # an engine error, shown as one (not as a Rust panic)
    assert "src/lib.rs" not in seen, seen


def test_the_jdb_header_of_a_one_line_cell(kernel):
    _, kc = kernel
    code = ("let bp = jit(|x: Array| { let y = x.sin(); debug::breakpoint!(x, y)?; Ok::<_, Error>(y * 2.0) }); "
            "bp.call(Array::scalar(2.0f32))")
    msg_id = kc.execute(code, allow_stdin=True)
    request = kc.get_stdin_msg(timeout=FIRST_CELL_TIMEOUT)
    assert request["msg_type"] == "input_request", request
    kc.input("c")
    reply, messages = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok", reply
    n = reply["content"]["execution_count"]
    text = "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")
    assert text.splitlines()[:2] == ["Entering jdb:", f"> cell {n}, line 1"], text


def test_bool_conversion_names_the_function_line_and_transformation(kernel):
    _, kc = kernel
    code = "let bad = jit(|x: Array| -> Result<Array> { if x.lt(3).to_bool()? { Ok(x) } else { Ok(x * -4) } }); bad.call(2)"
    reply, outputs = run(kc, code)
    assert (reply["status"], reply["ename"]) == ("error", "TracerBoolConversionError"), outputs
    n = reply["execution_count"]
    assert f"The error occurred while tracing the function <lambda> at cell {n}, line 1 for jit." in text_of(outputs), outputs
    # (A `grad(..)` result cannot be kept in a variable: evcxr cannot persist its type.)
    code = "grad(|x: Array| -> Result<Array> {\n    if x.gt(0.0).to_bool()? { Ok(x.sin()) } else { Ok(x) }\n})(Array::scalar(1.0f32))"
    reply, outputs = run(kc, code)
    assert (reply["status"], reply["ename"]) == ("error", "TracerBoolConversionError"), outputs
    n = reply["execution_count"]
    assert f"The error occurred while tracing the function <lambda> at cell {n}, line 1 for grad." in text_of(outputs), outputs


def test_a_magic_after_statements_and_its_compile_errors(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "let f2 = jit(|x: Array| x.cos());\nlet xs = jnp::arange(3.0);\n%jaxpr f2.call(&xs)")
    ok(reply, outputs)
    assert "cos a" in text_of(outputs), outputs
    reply, outputs = run(kc, "xs.shape()")
    ok(reply, outputs)

    reply, outputs = run(kc, "let y = 1;\n%jaxp f2.call(&xs)")
    assert (reply["status"], reply["ename"]) == ("error", "MagicError"), outputs
    assert "unknown magic `%jaxp` on line 2" in reply["evalue"], reply

    reply, outputs = run(kc, "%jaxpr f2.call(&undefined_thing)")
    assert (reply["status"], reply["ename"]) == ("error", "CompileError"), outputs
    tb = outputs[0]["content"]["traceback"]
    assert " --> cell:1:17" in tb, tb
    assert "1 | %jaxpr f2.call(&undefined_thing)" in tb, tb
    assert "  | " + " " * 16 + "^" * 15 + " not found in this scope" in tb, tb
    assert "jax::magic" not in "\n".join(tb), tb


def complete(kc, code: str) -> list[str]:
    """Completion matches at the end of `code`, asking a few times: rust-analyzer answers
    once it has loaded the session's crates."""
    matches: list[str] = []
    for _ in range(6):
        msg_id = kc.complete(code, len(code))
        reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        matches = reply["content"]["matches"]
        if any("(" in m for m in matches):  # rust-analyzer's answer is in
            break
        time.sleep(2)
    return matches


def test_completion_of_path_segments_and_after_a_dot(kernel):
    _, kc = kernel
    assert run(kc, "let zs = jnp::arange(4.0);")[0]["status"] == "ok"
    matches = complete(kc, "let t = jnp::ta")
    assert "jnp::tan(" in matches, matches
    assert "jnp::tanh(" in matches or "jnp::tanh" in matches, matches
    assert all(m.startswith("jnp::") for m in matches), matches
    matches = complete(kc, "zs.su")
    assert "super" not in matches and any(m.startswith("sum(") for m in matches), matches


def test_a_stack_overflow_is_reported_once(kernel):
    _, kc = kernel
    assert run(kc, "let kept = 41;")[0]["status"] == "ok"
    code = "fn r(n: u64) -> u64 { if n == 0 { 0 } else { 1 + r(n - 1) } }\nr(10_000_000)"
    reply, outputs = run(kc, code, timeout=FIRST_CELL_TIMEOUT)
    assert (reply["status"], reply["ename"]) == ("error", "StackOverflow"), outputs
    seen = text_of(outputs)
    assert "the cell overflowed its stack, which killed the evaluation process" in seen, seen
    assert "these variables were lost:" in seen and "kept" in seen, seen
    assert "turn deep recursion into a loop" in seen, seen
    assert "jaxrepl-stack-overflow" not in seen, seen
    # The child is back with the engine; the report does not repeat.
    reply, outputs = run(kc, "let again = jnp::arange(2.0); again.sum()", timeout=FIRST_CELL_TIMEOUT)
    ok(reply, outputs)
    seen = text_of(outputs)
    assert "Array(1., dtype=float32)" in seen, seen
    assert "overflow" not in seen.lower() and "recursion" not in seen.lower(), seen
    reply, outputs = run(kc, "40 + 2")
    ok(reply, outputs)
    assert "42" in text_of(outputs) and "overflow" not in text_of(outputs).lower(), outputs
