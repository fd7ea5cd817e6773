"""jupyter_kernel_test's conformance suite against the jaxrepl kernel, with Rust samples.

Every message is validated against the Jupyter message schema by jupyter_kernel_test; the
samples below check real values (stdout text, the execute_result of `1 + 2`, is_complete
verdicts, completion matches, inspect text). History and the pager are not implemented
(the kernel answers history_request with an empty list), so those tests are skipped.

The suite's own reply timeout is 15 s per request: each kernel is warmed up first (session
start, evcxr context, prelude) with a generous timeout, and the per-request timeout is
raised to CELL_TIMEOUT, since a cell that binds engine types can take seconds of type
inference on two busy cores.
"""

from __future__ import annotations

import os
import queue
import time

import jupyter_kernel_test as jkt
import pytest
from conftest import CELL_TIMEOUT, FIRST_CELL_TIMEOUT, KERNEL_NAME


def warm_up(kc) -> None:
    """Runs a first cell so that the session is up before the timed requests."""
    msg_id = kc.execute("let jaxrepl_warm_up = 1;", store_history=False)
    deadline = time.monotonic() + FIRST_CELL_TIMEOUT
    while True:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    assert reply["content"]["status"] == "ok", reply["content"]
    # Drain the warm-up's iopub traffic up to its idle.
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=5)
        except queue.Empty:
            break
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            break


@pytest.mark.usefixtures("jaxrepl_kernelspec")
class JaxreplKernelTests(jkt.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "rust"
    file_extension = ".rs"

    @classmethod
    def setUpClass(cls) -> None:
        # Read at call time by test_kernel_info and test_inspect; execute_helper below.
        jkt.TIMEOUT = CELL_TIMEOUT
        # The suite takes every display_data of a sample cell as the sample's output; on a
        # loaded machine a cell build over 1 s adds the "building the cell" progress display
        # (test_kernel_lifecycle.py tests it): start the kernel with
        # progress after 10 min, i.e. never for these samples.
        cls._progress_env = os.environ.get("JAXREPL_PROGRESS_AFTER_MS")
        os.environ["JAXREPL_PROGRESS_AFTER_MS"] = "600000"
        try:
            super().setUpClass()
        finally:
            if cls._progress_env is None:
                os.environ.pop("JAXREPL_PROGRESS_AFTER_MS", None)
            else:
                os.environ["JAXREPL_PROGRESS_AFTER_MS"] = cls._progress_env
        warm_up(cls.kc)

    def execute_helper(self, code, timeout=CELL_TIMEOUT, **kwargs):
        return super().execute_helper(code, timeout=timeout, **kwargs)

    code_hello_world = 'println!("hello, world");'
    code_stderr = 'eprintln!("something went to stderr");'

    # A compile error: one `error` output and an error reply.
    code_generate_error = 'let n: i32 = "not a number";'

    code_execute_result = [
        {"code": "1 + 2", "result": "3"},
        {"code": "vec![1, 2, 3]", "result": "[1, 2, 3]"},
        {"code": 'format!("{}-{}", "jax", 42)', "result": '"jax-42"'},
    ]

    # evcxr's content protocol: framed output on stdout becomes a display of that mime.
    code_display_data = [
        {
            "code": 'println!("EVCXR_BEGIN_CONTENT text/html\\n<b>bold</b>\\nEVCXR_END_CONTENT");',
            "mime": "text/html",
        },
    ]

    complete_code_samples = ["1 + 2", "let x = 1;", "fn f() -> i32 { 1 }", "%help"]
    incomplete_code_samples = ["fn f() {", "let v = vec![1,", 'let s = "open string']
    invalid_code_samples = ["fn f() }", "let x = (1));"]

    completion_samples = [
        {"text": "%jax", "matches": {"%jaxpr"}},
    ]

    code_inspect_sample = "std::mem::swap"


@pytest.mark.usefixtures("jaxrepl_kernelspec")
class JaxreplIopubWelcomeTests(jkt.IopubWelcomeTests):
    """JEP 65: iopub is an XPUB socket and every new subscriber is welcomed."""

    kernel_name = KERNEL_NAME
    support_iopub_welcome = True
