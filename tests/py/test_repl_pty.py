"""The real `jaxrepl` binary driven in a pseudo-terminal (pexpect): multi-line input,
Ctrl-C at the prompt and during a cell, history, Ctrl-D; and one engine cell.

The binary is $JAXREPL_BIN (exported by `make test`), else $CARGO_TARGET_DIR/debug/jaxrepl.
A missing binary is a failure, not a skip. Plain-Rust tests run with --no-prelude in a
private cache directory; the engine test uses the default cache (slot 0 is pre-warmed by
`make test-warm`).
"""
import os
import re
import shutil
import sys
import tempfile
import time

import pexpect
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A session start plus the first cell can take a while on a loaded 2-core machine.
START_TIMEOUT_S = 180
CELL_TIMEOUT_S = 120
# A cold engine build in a new build slot takes minutes on 2 cores.
ENGINE_TIMEOUT_S = 900
PROMPT = r"In \[(\d+)\]: "


def jaxrepl_bin():
    path = os.environ.get("JAXREPL_BIN")
    if not path:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        path = os.path.join(target, "debug", "jaxrepl")
    if not os.access(path, os.X_OK):
        pytest.fail("no jaxrepl binary at %s (set JAXREPL_BIN or run `make test`)" % path)
    return path


def spawn(args, env_extra=None, cache=None):
    env = dict(os.environ)
    env["NO_COLOR"] = "1"
    if cache is not None:
        env["JAXREPL_CACHE_DIR"] = cache
    env.update(env_extra or {})
    child = pexpect.spawn(jaxrepl_bin(), args, env=env, encoding="utf-8",
                          timeout=CELL_TIMEOUT_S, dimensions=(40, 200))
    child.logfile_read = sys.stdout
    return child


# Where an output line starts: after a line break, or, when the cell took over a second to
# build (a loaded machine), after the erase of the "building the cell" status line.
LINE_START = r"(?:\r\n|\n|\x1b\[2K)"


def expect_prompt(child, n, timeout=CELL_TIMEOUT_S):
    child.expect(r"In \[%d\]: " % n, timeout=timeout)


@pytest.fixture(scope="module")
def cache_dir():
    d = tempfile.mkdtemp(prefix="jaxrepl-pty-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_multiline_ctrl_c_history_and_ctrl_d(cache_dir):
    child = spawn(["--no-prelude"], cache=cache_dir)
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)

    # An open brace keeps the cell open: Enter adds lines, no new prompt until it closes.
    child.send("fn add(a: i32, b: i32) -> i32 {\r")
    child.send("    a + b\r")
    child.send("}\r")
    expect_prompt(child, 2, timeout=START_TIMEOUT_S)
    child.send("add(2, 40)\r")
    child.expect(LINE_START + r"42\r\n")
    expect_prompt(child, 3)

    # Ctrl-C at the prompt drops the half-typed line and shows the same prompt again.
    child.send("let junk = ")
    child.send("\x03")
    expect_prompt(child, 3)
    child.send("let kept = String::from(\"kept\");\r")
    expect_prompt(child, 4)
    child.send("kept.len() + add(1, 1) as usize\r")
    child.expect(LINE_START + r"6\r\n")
    expect_prompt(child, 5)

    # Keys that arrive together with a Ctrl-C (typed while the prompt was busy, say in a
    # slow Tab completion) are kept for the fresh prompt: rustyline read them all at once,
    # and its interrupt used to discard what it had read past the Ctrl-C.
    child.send("let junk2 = \x03kept.len() * 7\r")
    child.expect(LINE_START + r"28\r\n")
    expect_prompt(child, 6)

    # Ctrl-D on an empty line exits cleanly.
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)

    with open(os.path.join(cache_dir, "history.txt"), encoding="utf-8") as f:
        history = f.read()
    assert "add(2, 40)" in history
    assert "let junk" not in history


def test_ctrl_c_during_plain_rust_restarts_child_and_names_lost_variables(cache_dir):
    child = spawn(["--no-prelude"], cache=cache_dir)
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send("let survivor = vec![1u8, 2, 3];\r")
    expect_prompt(child, 2, timeout=START_TIMEOUT_S)
    child.send("println!(\"looping\"); loop { std::hint::spin_loop(); }\r")
    # The output line, not the echoed input (`println!("looping")`): interrupting while the
    # cell still compiles is a different, correct path ("nothing ran").
    child.expect(LINE_START + r"looping\r\n", timeout=CELL_TIMEOUT_S)
    child.send("\x03")
    child.expect(r"Interrupted: .*these variables were lost: survivor", timeout=60)
    expect_prompt(child, 3)
    # The restarted child evaluates again; the old variable is gone.
    child.send("survivor.len()\r")
    child.expect(r"cannot find value `survivor`")
    expect_prompt(child, 4)
    child.send("6 * 7\r")
    child.expect(LINE_START + r"42\r\n")
    expect_prompt(child, 5)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)


def engine_available():
    return os.path.isfile(os.path.join(ROOT, "engine", "src", "interactive.rs")) or \
        os.path.isdir(os.path.join(ROOT, "engine", "src", "interactive"))


def test_engine_cell_in_the_terminal():
    if not engine_available():
        pytest.fail("the engine has no `interactive` module yet (engine/src/interactive*)")
    child = spawn([], env_extra={"JAXREPL_ENGINE_DIR": os.path.join(ROOT, "engine")})
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send("let x = jnp::arange(8.0); let f = jit(|x: Array| x.sin() * 2.0 + 1.0); f.call(&x)\r")
    # numpy-style repr: sin(x) * 2 + 1 at 0 and 1 (float32: 2.682942).
    child.expect(r"Array\(\[\s*1\.\s*,\s*2\.682942", timeout=ENGINE_TIMEOUT_S)
    expect_prompt(child, 2)

    # The session's first Tab completion (rust-analyzer reads the engine crate: seconds)
    # shows a note after the cursor, erases it, and completes the engine's API.
    child.send("jnp::aran\t")
    child.expect(r"\x1b7  \(completing: first time, a few seconds\)\x1b8", timeout=CELL_TIMEOUT_S)
    child.expect(r"\x1b\[K", timeout=CELL_TIMEOUT_S)
    child.expect(r"jnp::arange", timeout=CELL_TIMEOUT_S)
    child.send("\x03")
    expect_prompt(child, 2)

    # Ctrl-C during engine work (timeit runs for about 2 s once the cell has started) stops
    # it with the engine's error, and the variables stay: the next cell uses `f` and `x`.
    child.send("println!(\"started\"); jax::magic::timeit(|| f.call(&x))\r")
    # "started" begins a line, or follows the erase of the cell-build status line.
    child.expect(r"(\r\n|\x1b\[2K)started\r\n", timeout=CELL_TIMEOUT_S)
    child.send("\x03")
    child.expect(r"(KeyboardInterrupt|Interrupted)", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 3)
    child.send("f.call(&x)\r")
    child.expect(r"Array\(\[\s*1\.\s*,\s*2\.682942", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 4)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)


def test_breakpoint_prompt_in_the_terminal():
    # debug::breakpoint! reads jdb commands from the terminal while the cell runs.
    if not engine_available():
        pytest.fail("the engine has no `interactive` module yet (engine/src/interactive*)")
    child = spawn([], env_extra={"JAXREPL_ENGINE_DIR": os.path.join(ROOT, "engine")})
    expect_prompt(child, 1, timeout=START_TIMEOUT_S)
    child.send("let bp = jit(|x: Array| { let y = x.sin(); debug::breakpoint!(x, y)?; Ok::<_, Error>(y * 2.0) }); "
               "bp.call(Array::scalar(2.0f32))\r")
    child.expect(r"Entering jdb:", timeout=ENGINE_TIMEOUT_S)
    child.expect(r"\(jdb\) ", timeout=CELL_TIMEOUT_S)
    child.send("p y\r")
    child.expect(r"0\.9092974", timeout=CELL_TIMEOUT_S)  # sin(2) in float32
    child.expect(r"\(jdb\) ", timeout=CELL_TIMEOUT_S)
    child.send("c\r")
    child.expect(r"Array\(1\.81859", timeout=CELL_TIMEOUT_S)
    expect_prompt(child, 2)
    child.sendeof()
    child.expect(pexpect.EOF, timeout=60)
