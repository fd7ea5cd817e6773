"""The jaxrepl kernel driven through jupyter_client, the way notebooks and consoles drive it.

Covers what jupyter_kernel_test does not: message order within a cell, the cell's own line
numbers in compile errors, execution counts, code-point cursor positions, requests the
kernel cannot honour (still answered), interrupt of a long-running cell, SIGINT, restart,
shutdown (the evaluation child goes too), the kernel exiting when its parent dies, and
bad input: panics and a dying evaluation child keep the kernel answering.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CELL_TIMEOUT, FIRST_CELL_TIMEOUT, KERNEL_NAME
from jupyter_client.connect import write_connection_file
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.usefixtures("jaxrepl_kernelspec")


# ---------------------------------------------------------------- helpers


def collect(kc, msg_id: str, timeout: float = CELL_TIMEOUT) -> tuple[dict, list[dict]]:
    """The shell reply to `msg_id` and all of its iopub messages up to and including idle."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    messages = []
    while True:
        msg = kc.get_iopub_msg(timeout=max(5.0, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return reply, messages


def is_progress(m: dict) -> bool:
    """A compile/cell-build progress display (transient; shown only for steps over 1 s), or
    the clear_output that removes finished progress displays before any other output."""
    if m["msg_type"] == "clear_output":
        return True
    return (m["msg_type"] in ("display_data", "update_display_data")
            and (m["content"].get("transient") or {}).get("display_id", "").startswith("jaxrepl-progress-"))


def run(kc, code: str, timeout: float = CELL_TIMEOUT, keep_progress: bool = False, **kw) -> tuple[dict, list[dict]]:
    """Executes `code`; returns the reply content and the output messages (no status or
    execute_input; no progress displays unless `keep_progress`)."""
    reply, messages = collect(kc, kc.execute(code, **kw), timeout)
    outputs = [m for m in messages if m["msg_type"] not in ("status", "execute_input")
               and (keep_progress or not is_progress(m))]
    return reply["content"], outputs


def result_text(outputs: list[dict]) -> str:
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert len(results) == 1, outputs
    return results[0]["content"]["data"]["text/plain"]


def children_of(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid` (from /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry.name))
    return kids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def start_kernel():
    km, kc = start_new_kernel(kernel_name=KERNEL_NAME, startup_timeout=60)
    reply, _ = run(kc, "let lifecycle_ready = true;", timeout=FIRST_CELL_TIMEOUT, store_history=False)
    assert reply["status"] == "ok", reply
    return km, kc


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_kernel()
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=False)


# ---------------------------------------------------------------- protocol behaviour


def test_heartbeat_and_kernel_info(kernel):
    km, kc = kernel
    assert kc.hb_channel.is_beating()
    msg_id = kc.kernel_info()
    reply = kc.get_shell_msg(timeout=10)
    assert reply["parent_header"]["msg_id"] == msg_id
    info = reply["content"]["language_info"]
    assert (info["name"], info["file_extension"], info["mimetype"]) == ("rust", ".rs", "text/rust")
    assert km.kernel_spec.interrupt_mode == "message"


def test_cell_messages_arrive_in_order(kernel):
    _, kc = kernel
    code = 'println!("first"); eprintln!("second"); 40 + 2'
    msg_id = kc.execute(code)
    reply, messages = collect(kc, msg_id)
    messages = [m for m in messages if not is_progress(m)]
    kinds = [m["msg_type"] for m in messages]
    assert kinds == ["status", "execute_input", "stream", "stream", "execute_result", "status"], kinds
    assert messages[0]["content"]["execution_state"] == "busy"
    assert messages[1]["content"]["code"] == code
    # stdout and stderr reach the kernel through two pipes, so their relative order is not
    # defined (as in ipykernel); each arrives whole, on its own stream, before the result.
    streams = sorted((m["content"]["name"], m["content"]["text"]) for m in messages[2:4])
    assert streams == [("stderr", "second\n"), ("stdout", "first\n")]
    assert messages[4]["content"]["data"]["text/plain"] == "42"
    assert messages[4]["content"]["execution_count"] == reply["content"]["execution_count"]
    # The reply is sent before idle is published.
    assert reply["header"]["date"] <= messages[-1]["header"]["date"]


def test_compile_error_has_the_cells_line_numbers(kernel):
    _, kc = kernel
    reply, outputs = run(kc, 'let fine = 1;\nlet broken: i32 = "text";')
    assert reply["status"] == "error"
    assert [m["msg_type"] for m in outputs] == ["error"]
    error = outputs[0]["content"]
    assert error["ename"] == "CompileError"
    assert error["evalue"] == "mismatched types"
    assert any("cell:2:" in line for line in error["traceback"]), error["traceback"]
    assert any('let broken: i32 = "text";' in line for line in error["traceback"])
    # The reply repeats the error output.
    assert (reply["ename"], reply["evalue"], reply["traceback"]) == (
        error["ename"],
        error["evalue"],
        error["traceback"],
    )


def test_variables_survive_a_failed_cell(kernel):
    _, kc = kernel
    assert run(kc, "let kept = 41;")[0]["status"] == "ok"
    assert run(kc, "let oops: u8 = kept;")[0]["status"] == "error"
    reply, outputs = run(kc, "kept + 1")
    assert reply["status"] == "ok"
    assert result_text(outputs) == "42"


def test_execution_count_rules(kernel):
    _, kc = kernel
    first = run(kc, "1")[0]["execution_count"]
    # silent: no execute_input, no execute_result, the count does not move
    msg_id = kc.execute("2", silent=True)
    reply, messages = collect(kc, msg_id)
    assert reply["content"]["execution_count"] == first
    assert [m["msg_type"] for m in messages] == ["status", "status"]
    # store_history=False: the result is shown, the count does not move
    reply, outputs = run(kc, "3", store_history=False)
    assert reply["execution_count"] == first
    assert result_text(outputs) == "3"
    assert run(kc, "4")[0]["execution_count"] == first + 1


def test_completion_positions_count_code_points(kernel):
    _, kc = kernel
    assert run(kc, "let crème_brûlée = 1;")[0]["status"] == "ok"
    code = "let é = 0; crème_b"
    msg_id = kc.complete(code, len(code))
    reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    content = reply["content"]
    assert "crème_brûlée" in content["matches"], content
    # code points: "let é = 0; " is 11 code points (12 bytes); the cursor is at 18 (20 bytes)
    assert (content["cursor_start"], content["cursor_end"]) == (11, 18)


def test_inspect_shows_a_variables_type(kernel):
    _, kc = kernel
    assert run(kc, "let bytes = vec![1u8, 2, 3];")[0]["status"] == "ok"
    msg_id = kc.inspect("bytes.len()", 2)
    reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["found"] is True
    assert "Vec<u8>" in reply["content"]["data"]["text/plain"]


def test_inspect_shows_an_engine_items_doc_comment(kernel):
    # Shift-Tab on an engine function: rust-analyzer's hover over the prelude's crate,
    # with the item's signature and its doc comment (engine/src/numpy/mod.rs).
    _, kc = kernel
    assert run(kc, "let probe = 1;")[0]["status"] == "ok"
    code = "let y = jnp::matmul_with(&a, &b, \"highest\");"
    cursor = code.index("matmul_with") + 3
    msg_id = kc.inspect(code, cursor)
    reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    content = reply["content"]
    assert content["status"] == "ok" and content["found"] is True, content
    text = content["data"]["text/plain"]
    assert "fn matmul_with" in text, text
    assert "jnp.matmul(a, b, precision=...)" in text, text
    assert "unknown precision string" in text, text


def test_requests_the_kernel_cannot_honour_are_answered(kernel):
    _, kc = kernel
    # an unknown request type: an error reply of the matching type
    msg = kc.session.msg("frobnicate_request", {})
    kc.shell_channel.send(msg)
    reply, messages = collect(kc, msg["header"]["msg_id"], timeout=30)
    assert reply["msg_type"] == "frobnicate_reply"
    assert reply["content"]["status"] == "error"
    assert [m["content"]["execution_state"] for m in messages] == ["busy", "idle"]
    # an execute_request without `code`: an execute_reply with an error, not silence
    msg = kc.session.msg("execute_request", {"silent": False})
    kc.shell_channel.send(msg)
    reply, _ = collect(kc, msg["header"]["msg_id"], timeout=30)
    assert reply["msg_type"] == "execute_reply"
    assert (reply["content"]["status"], reply["content"]["ename"]) == ("error", "BadRequest")
    # history is not kept: an empty, well-formed reply
    msg_id = kc.history(hist_access_type="tail", n=10)
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert (reply["content"]["status"], reply["content"]["history"]) == ("ok", [])
    # no comm targets: comm_info lists none, and a comm_open is closed at once
    msg_id = kc.comm_info()
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert (reply["content"]["status"], reply["content"]["comms"]) == ("ok", {})
    msg = kc.session.msg("comm_open", {"comm_id": "c-1", "target_name": "nothing", "data": {}})
    kc.shell_channel.send(msg)
    deadline = time.monotonic() + 30
    while True:
        out = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if out["parent_header"].get("msg_id") == msg["header"]["msg_id"] and out["msg_type"] == "comm_close":
            assert out["content"]["comm_id"] == "c-1"
            break
    # the kernel still works
    assert result_text(run(kc, "5 * 5")[1]) == "25"


def test_a_panic_keeps_earlier_variables(kernel):
    _, kc = kernel
    assert run(kc, "let survivor = 20;")[0]["status"] == "ok"
    reply, outputs = run(kc, 'panic!("boom")')
    assert (reply["status"], reply["ename"], reply["evalue"]) == ("error", "Panic", "boom")
    assert [m["msg_type"] for m in outputs] == ["error"]
    assert f"panicked at cell {reply['execution_count']}, line 1:" in outputs[0]["content"]["traceback"][0]
    assert result_text(run(kc, "survivor + 1")[1]) == "21"


def test_a_dead_evaluation_child_is_reported_and_replaced(kernel):
    _, kc = kernel
    assert run(kc, "let doomed = 3;")[0]["status"] == "ok"
    reply, outputs = run(kc, "std::process::abort();", timeout=FIRST_CELL_TIMEOUT)
    assert (reply["status"], reply["ename"]) == ("error", "ChildDied")
    assert "doomed" in reply["evalue"]  # the user is told which variables were lost
    assert [m["msg_type"] for m in outputs] == ["error"]
    assert run(kc, "doomed")[0]["status"] == "error"
    assert result_text(run(kc, "11 * 11")[1]) == "121"


prelude_off = pytest.mark.skipif(
    os.environ.get("JAXREPL_NO_PRELUDE", "") not in ("", "0"),
    reason="JAXREPL_NO_PRELUDE is set: the engine is not loaded",
)


@prelude_off
def test_engine_cells_through_the_kernel(kernel):
    _, kc = kernel
    assert run(kc, "let x = jnp::arange(3.0);")[0]["status"] == "ok"
    reply, outputs = run(kc, "let f = jit(|x: Array| x.sin() * 2.0 + 1.0);\nf.call(&x)")
    assert reply["status"] == "ok", reply
    assert result_text(outputs) == "Array([1.      , 2.682942, 2.818595], dtype=float32)"
    reply, outputs = run(kc, "%jaxpr f.call(&x)")
    assert result_text(outputs).startswith("{ lambda ; a:f32[3]. let\n    b:f32[3] = sin a\n")
    # an engine error value: one error output naming the op and both shapes
    reply, outputs = run(kc, "jnp::add(&x, &jnp::arange(4.0))")
    assert (reply["status"], reply["ename"]) == ("error", "TypeError")
    assert "add got incompatible shapes for broadcasting: (3,), (4,)" in reply["evalue"]
    assert [m["msg_type"] for m in outputs] == ["error"]


@prelude_off
def test_arrays_carry_an_html_table(kernel):
    _, kc = kernel
    reply, outputs = run(kc, "jnp::arange(6.0).reshape(&[2, 3])")
    assert reply["status"] == "ok", reply
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert len(results) == 1, outputs
    data = results[0]["content"]["data"]
    assert data["text/plain"] == "Array([[0., 1., 2.],\n       [3., 4., 5.]], dtype=float32)"
    html = data["text/html"]
    assert "<b>Array</b> float32[2,3]" in html, html
    cells = [part.split(">", 1)[1].split("</td>", 1)[0] for part in html.split("<td")[1:]]
    assert cells == ["0.", "1.", "2.", "3.", "4.", "5."], html


@prelude_off
def test_long_compiles_show_progress_that_is_emptied_at_the_end(kernel):
    _, kc = kernel
    # Announce every compile at once (the default waits a second).
    assert run(kc, "jax::progress::set_show_after(std::time::Duration::ZERO);")[0]["status"] == "ok"
    try:
        reply, outputs = run(kc, "let g = jit(|x: Array| (x.cos() * 3.0).exp() + x);\ng.call(&jnp::arange(5.0))",
                             keep_progress=True)
    finally:
        run(kc, "jax::progress::set_show_after(jax::progress::SHOW_AFTER);")
    assert reply["status"] == "ok", reply
    progress = [m for m in outputs if m["msg_type"] in ("display_data", "update_display_data")
                and m["content"].get("transient", {}).get("display_id", "").startswith("jaxrepl-progress-compile-")]
    assert progress, [m["msg_type"] for m in outputs]
    first, last = progress[0], progress[-1]
    assert first["msg_type"] == "display_data", progress
    assert first["content"]["data"]["text/plain"].startswith("compiling jit("), first
    # At the end the display is emptied, or, when nothing but progress was shown in the
    # cell yet (as here), removed by a clear_output (docs/engine-api.md, kernel/src/execute.rs).
    after = outputs[outputs.index(last) + 1:]
    cleared = any(m["msg_type"] == "clear_output" for m in after)
    emptied = last["msg_type"] == "update_display_data" and last["content"]["data"]["text/plain"] == ""
    assert cleared or emptied, outputs
    # the value is still the cell's execute_result, after the progress
    assert result_text(outputs).startswith("Array([")
    assert outputs.index(progress[-1]) < next(i for i, m in enumerate(outputs) if m["msg_type"] == "execute_result")


# ---------------------------------------------------------------- interrupt, signals


def test_interrupt_stops_a_long_running_cell(kernel):
    km, kc = kernel
    code = (
        'println!("started");\n'
        "std::thread::sleep(std::time::Duration::from_secs(300));\n"
        'println!("not reached");'
    )
    msg_id = kc.execute(code)
    # wait until the cell is really running in the evaluation child
    deadline = time.monotonic() + CELL_TIMEOUT
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            assert msg["content"]["text"] == "started\n"
            break
    t0 = time.monotonic()
    km.interrupt_kernel()
    reply, messages = collect(kc, msg_id, timeout=60)
    elapsed = time.monotonic() - t0
    assert reply["content"]["status"] == "error"
    assert elapsed < 30, f"interrupt took {elapsed:.1f} s"
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert errors, [m["msg_type"] for m in messages]
    assert not any("not reached" in m["content"].get("text", "") for m in messages)
    # the kernel (and a fresh evaluation child) carry on
    reply, outputs = run(kc, "6 * 7", timeout=FIRST_CELL_TIMEOUT)
    assert reply["status"] == "ok"
    assert result_text(outputs) == "42"


@prelude_off
def test_interrupt_stops_a_loop_of_short_engine_calls_and_keeps_variables(kernel):
    """A Rust loop of eager ops and cached jitted calls, each too short for a wait to see
    the interrupt, stops at its next engine call (the engine polls the flag there): the
    cell fails with KeyboardInterrupt and the evaluation child is not restarted, so a
    variable from before is still there (a restart would have lost it)."""
    km, kc = kernel
    assert run(kc, "let kept_before_loop = jnp::arange(3.0);", timeout=FIRST_CELL_TIMEOUT)[0]["status"] == "ok"
    code = (
        "let mut y = jnp::arange(8.0);\n"
        "let cosine = jit(|a: Array| a.cos());\n"
        'println!("looping");\n'
        "loop { y = y.sin(); y = cosine.call(&y).unwrap(); }"
    )
    msg_id = kc.execute(code)
    deadline = time.monotonic() + CELL_TIMEOUT
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            assert msg["content"]["text"] == "looping\n"
            break
    time.sleep(0.5)
    km.interrupt_kernel()
    reply, messages = collect(kc, msg_id, timeout=60)
    assert reply["content"]["status"] == "error"
    text = reply["content"]["ename"] + ": " + reply["content"]["evalue"]
    assert "nterrupt" in text, text  # KeyboardInterrupt (sin) or Interrupted (the unwrap)
    assert not any("lost" in m["content"].get("text", "") for m in messages), messages
    reply, outputs = run(kc, "kept_before_loop")
    assert reply["status"] == "ok", reply
    assert result_text(outputs) == "Array([0., 1., 2.], dtype=float32)"


def test_interrupt_while_idle_is_harmless(kernel):
    km, kc = kernel
    km.interrupt_kernel()
    assert result_text(run(kc, "7 + 1")[1]) == "8"


def test_sigint_does_not_kill_the_kernel(kernel):
    km, kc = kernel
    os.kill(km.provisioner.process.pid, signal.SIGINT)
    time.sleep(0.5)
    assert km.is_alive()
    assert result_text(run(kc, "9 + 1")[1]) == "10"


# ---------------------------------------------------------------- restart, shutdown, parent death


def test_restart_gives_a_fresh_session():
    km, kc = start_kernel()
    try:
        assert run(kc, "let before_restart = 1;")[0]["status"] == "ok"
        old_pid = km.provisioner.process.pid
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=60)
        assert km.provisioner.process.pid != old_pid
        assert wait_until(lambda: not alive(old_pid), 10)
        reply, outputs = run(kc, "before_restart", timeout=FIRST_CELL_TIMEOUT)
        assert reply["status"] == "error"  # the variable is gone with the old session
        reply, outputs = run(kc, "2 + 2")
        assert result_text(outputs) == "4"
        assert reply["execution_count"] == 2  # counting starts again
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_shutdown_during_a_running_cell_ends_kernel_and_evaluation_child():
    km, kc = start_kernel()
    pid = km.provisioner.process.pid
    evaluation_children = children_of(pid)
    assert evaluation_children, "the session should have started its evaluation child"
    # A cell that will not finish on its own: control must still answer, and the
    # evaluation child must not outlive the kernel.
    msg_id = kc.execute('println!("busy");\nloop { std::thread::sleep(std::time::Duration::from_secs(1)); }')
    deadline = time.monotonic() + CELL_TIMEOUT
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            break
    msg_id = kc.shutdown()
    reply = kc.get_control_msg(timeout=10)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"] == {"status": "ok", "restart": False}
    assert wait_until(lambda: not alive(pid), 15), "the kernel did not exit"
    assert wait_until(lambda: not any(alive(c) for c in evaluation_children), 10)
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # only cleans up the manager's state


def test_kernel_exits_when_its_parent_dies(jaxrepl_kernelspec, tmp_path):
    connection_file = tmp_path / "kernel.json"
    write_connection_file(str(connection_file), key=os.urandom(16).hex().encode())
    binary = str(jaxrepl_kernelspec.binary)
    # A parent shell that starts the kernel, says its pid, and is then killed.
    parent = subprocess.Popen(
        ["sh", "-c", f'"{binary}" --connection-file "{connection_file}" & echo $!; wait'],
        stdout=subprocess.PIPE,
        text=True,
    )
    kernel_pid = int(parent.stdout.readline())
    parent.stdout.close()
    assert wait_until(lambda: alive(kernel_pid), 5)
    time.sleep(1.0)
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not alive(kernel_pid), 10), "orphaned kernel kept running"
    json.loads(connection_file.read_text())  # the file was ours; nothing else to clean
