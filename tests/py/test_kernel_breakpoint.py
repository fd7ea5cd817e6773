"""debug::breakpoint! over Jupyter's stdin channel: the kernel turns the engine's input
requests into `input_request` messages when the execute request allows stdin, and the
client's `input_reply` values are the jdb commands (JAX's jax.debug.breakpoint prompt)."""

from __future__ import annotations

import math
import os
import re

import pytest
from conftest import FIRST_CELL_TIMEOUT
from test_kernel_lifecycle import collect, kernel  # noqa: F401 (kernel: a module-scoped fixture)

pytestmark = [
    pytest.mark.usefixtures("jaxrepl_kernelspec"),
    pytest.mark.skipif(os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
                       reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded"),
]

CELL = """let bp = jit(|x: Array| {
    let y = x.sin();
    debug::breakpoint!(x, y)?;
    Ok::<_, Error>(y * 2.0)
});
bp.call(Array::scalar(2.0f32))"""


def stream_text(messages):
    return "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")


def result_value(messages):
    results = [m for m in messages if m["msg_type"] == "execute_result"]
    assert len(results) == 1, messages
    m = re.match(r"Array\(([-\d.]+), dtype=float32\)", results[0]["content"]["data"]["text/plain"])
    assert m, results
    return float(m.group(1))


def test_breakpoint_reads_commands_from_input_replies(kernel):
    _, kc = kernel
    msg_id = kc.execute(CELL, allow_stdin=True)
    prompts = []
    for command in ["p y", "pp x", "p nope", "c"]:
        request = kc.get_stdin_msg(timeout=FIRST_CELL_TIMEOUT)
        assert request["msg_type"] == "input_request", request
        assert request["parent_header"]["msg_id"] == msg_id
        prompts.append(request["content"]["prompt"])
        kc.input(command)
    reply, messages = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok", reply
    assert prompts == ["(jdb) "] * 4
    text = stream_text(messages)
    assert text.startswith("Entering jdb:\n> "), text
    lines = text.splitlines()
    assert abs(float(lines[2]) - math.sin(2.0)) < 1e-6, text  # p y
    assert lines[3] == "Array(2., dtype=float32)", text  # pp x
    assert lines[4] == "*** NameError: name 'nope' is not defined; the frame has: x, y", text
    assert abs(result_value(messages) - 2 * math.sin(2.0)) < 1e-6


def test_without_allow_stdin_the_breakpoint_continues(kernel):
    _, kc = kernel
    reply, messages = collect(kc, kc.execute("bp.call(Array::scalar(1.0f32))", allow_stdin=False))
    assert reply["content"]["status"] == "ok", reply
    text = stream_text(messages)
    assert "(no input: continuing) frame:\n  x = 1.0\n" in text, text
    assert abs(result_value(messages) - 2 * math.sin(1.0)) < 1e-6
