#!/usr/bin/env python3
"""scripts/bench.py -- the judge: our engine and JAX on the same workloads, in one run.

One run executes
  1. our bench binary (JSON on stdout; contract and keys in docs/bench.md),
  2. ../shared/bench/jax_bench.py --only compile,dispatch,throughput,loops,numpy_limits,stream_c
     under .venv-jax (JAX 0.10.2 plus the machine's limits: numpy/OpenBLAS, C STREAM, FMA peak),
  3. a few JAX workloads the shared script lacks, with its own helpers (the MLP training step,
     peak RSS of the MLP grad benchmark, RSS after 100k cached calls),
  4. if $JAXREPL_BIN is an executable jaxrepl, the session figures (start to prompt,
     trivial cell, first engine cell) through a pseudo-terminal,
and prints one table:
    figure | ours | JAX | ratio | machine limit | target | met
`ratio` is ours / JAX of the figure shown (times: below 1 is faster; rates: above 1 is
faster). `limit` is the machine's figure from the same run where one applies. `target` is
issue 4's. A full run (not --quick, not --skip-jax, no --ours-json) also writes the table and
the machine it ran on to docs/performance.md. Raw outputs go to .cache/bench/.
Stdlib only. Exit status: 0 when both sides ran, 2 when our figures are missing, 1 when
the JAX side failed.
"""
import argparse
import json
import os
import platform
import pty
import select
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "bench")
DOC = os.path.join(ROOT, "docs", "performance.md")
JAX_PARTS = "compile,dispatch,throughput,loops,multidevice,numpy_limits,stream_c"

# Machine limits: (part, key, kind, short label). kind "rate" uses rate_at_min (best).
L_NUMPY_CALL = [("dispatch", "numpy_sin", "time", "numpy sin call")]
L_COPY = [("numpy_limits", "copy_40MB_2t", "rate", "numpy copy 2t"),
          ("stream_c", "copy_40MB_2t", "rate", "STREAM copy 2t")]
L_COPY_BIG = [("numpy_limits", "copy_400MB_2t", "rate", "numpy copy 400MB 2t"),
              ("stream_c", "triad_400MB_2t", "rate", "STREAM triad 400MB 2t")]
L_FMA = [("stream_c", "fma_peak_2t", "rate", "FMA peak 2t")]


def L_SGEMM(m):
    return [("numpy_limits", "sgemm_%d_2t" % m, "rate", "OpenBLAS 2t")] + L_FMA


# The table. Each row: (label, (our part, key), (JAX part, key), kind, limits, target).
# kind: "time" compares medians; "rate" compares rate_at_median (throughput); "value" a
# single measured number. target: (factor, text) -- times: ours <= factor x JAX; rates:
# ours >= factor x JAX; ("abs", bound, text) -- ours <= bound in the figure's unit.
# Our keys are JAX's keys (docs/bench.md); `train`, `memory` and `session` are ours, with
# JAX's side from part 3 above where one exists.
ROWS = []


def _compile_rows(name, desc, total_target=None):
    for stage in ("trace", "lower", "compile", "first_exec", "first_call_total", "steady_exec"):
        tgt = total_target if stage == "first_call_total" else None
        ROWS.append(("%s: %s" % (desc, stage), ("compile", "%s/%s" % (name, stage)),
                     ("compile", "%s/%s" % (name, stage)), "time", [], tgt))


_compile_rows("a_elementwise", "first call sin(x)*2+1 f32[1024]", (0.5, "<= 0.5x JAX"))
_compile_rows("b_mlp_fwd", "MLP fwd 3x[128x512]")
_compile_rows("c_mlp_grad", "MLP grad 3x[128x512]", (0.5, "<= 0.5x JAX"))
_compile_rows("d_scan1000", "scan 1000 steps f32[16]", (0.5, "<= 0.5x JAX"))
for _st in ("trace", "lower", "compile", "first_exec", "first_call_total", "steady_exec"):
    ROWS.append(("MLP training step: %s" % _st, ("train", "mlp_train_step/" + _st),
                 ("train", "mlp_train_step/" + _st), "time", [], None))
# steady state of the MLP fwd/grad: issue 4 wants >= 1.0x JAX throughput, i.e. time <= 1.0x
for i, r in enumerate(ROWS):
    if r[1][1] in ("b_mlp_fwd/steady_exec", "c_mlp_grad/steady_exec"):
        ROWS[i] = r[:5] + ((1.0, "<= 1.0x JAX"),)
ROWS += [
    ("cached jit x+1 f32[8], call+block", ("dispatch", "jit_1arg_sync"), ("dispatch", "jit_1arg_sync"),
     "time", L_NUMPY_CALL, (0.2, "<= 0.2x JAX")),
    ("cached jit x+1 f32[8], call only", ("dispatch", "jit_1arg_async"), ("dispatch", "jit_1arg_async"),
     "time", L_NUMPY_CALL, None),
    ("cached jit x*y+z 3 args f32[8], call+block", ("dispatch", "jit_3arg_sync"), ("dispatch", "jit_3arg_sync"),
     "time", L_NUMPY_CALL, (0.2, "<= 0.2x JAX")),
    ("cached jit x*y+z 3 args f32[8], call only", ("dispatch", "jit_3arg_async"), ("dispatch", "jit_3arg_async"),
     "time", L_NUMPY_CALL, None),
    ("cached jit x+1 f32[1024], call+block", ("dispatch", "jit_1arg_1k_sync"), ("dispatch", "jit_1arg_1k_sync"),
     "time", [], None),
    ("cached jit x+1 f32[1024], call only", ("dispatch", "jit_1arg_1k_async"), ("dispatch", "jit_1arg_1k_async"),
     "time", [], None),
    ("eager sin f32[8], call+block", ("dispatch", "eager_sin_sync"), ("dispatch", "eager_sin_sync"),
     "time", L_NUMPY_CALL, (0.2, "<= 0.2x JAX")),
    ("eager sin f32[8], call only", ("dispatch", "eager_sin_async"), ("dispatch", "eager_sin_async"),
     "time", L_NUMPY_CALL, None),
    ("eager x+y f32[8], call+block", ("dispatch", "eager_add_sync"), ("dispatch", "eager_add_sync"),
     "time", [], None),
    ("tanh(x*1.5+0.5)*x f32[1e7], fresh output", ("throughput", "elementwise_chain_1e7"),
     ("throughput", "elementwise_chain_1e7"), "rate", L_COPY, (4.0, ">= 4x JAX")),
    ("same, into a donated buffer", ("throughput", "elementwise_chain_1e7_donated"),
     ("throughput", "elementwise_chain_1e7_donated"), "rate", L_COPY, (1.0, ">= 1.0x JAX")),
    ("x*2 f32[1e7], fresh output", ("throughput", "scale_1e7"), ("throughput", "scale_1e7"),
     "rate", L_COPY, None),
    ("x*2 f32[1e7], donated buffer", ("throughput", "scale_1e7_donated"), ("throughput", "scale_1e7_donated"),
     "rate", L_COPY, None),
    ("tanh(x*1.5+0.5)*x f32[1e6]", ("throughput", "elementwise_chain_1e6"), ("throughput", "elementwise_chain_1e6"),
     "rate", [], None),
    ("sum f32[1e7]", ("throughput", "sum_1e7"), ("throughput", "sum_1e7"), "rate", L_COPY, (1.0, ">= 1.0x JAX")),
]
for _m in (256, 1024, 2048):
    ROWS.append(("matmul f32 %d^3" % _m, ("throughput", "matmul_%d" % _m), ("throughput", "matmul_%d" % _m),
                 "rate", L_SGEMM(_m), (1.0, ">= 1.0x JAX")))
ROWS += [
    ("batch matmul [16,512,512]", ("throughput", "bmm_16x512"), ("throughput", "bmm_16x512"),
     "rate", L_FMA, (1.0, ">= 1.0x JAX")),
    ("batch matmul [256,64,64]", ("throughput", "bmm_256x64"), ("throughput", "bmm_256x64"),
     "rate", L_FMA, (1.0, ">= 1.0x JAX")),
    ("softmax f32[4096,1024], fresh output", ("throughput", "softmax_4096x1024"),
     ("throughput", "softmax_4096x1024"), "rate", L_COPY, (1.0, ">= 1.0x JAX")),
    ("softmax, donated buffer", ("throughput", "softmax_4096x1024_donated"),
     ("throughput", "softmax_4096x1024_donated"), "rate", L_COPY, None),
    ("fori_loop 10k scalar, static trip (per iter)", ("loops", "fori_static_10k"), ("loops", "fori_static_10k"),
     "time", [], (1.0, "<= 1.0x JAX")),
    ("fori_loop 10k scalar, traced trip (per iter)", ("loops", "fori_dynamic_10k"), ("loops", "fori_dynamic_10k"),
     "time", [], (1.0, "<= 1.0x JAX")),
    ("while_loop 10k scalar (per iter)", ("loops", "while_10k"), ("loops", "while_10k"),
     "time", [], (1.0, "<= 1.0x JAX")),
    ("fori_loop 10k, f32[1024] body (per iter)", ("loops", "fori_vec1024_10k"), ("loops", "fori_vec1024_10k"),
     "time", [], None),
    ("fori_loop 10k, tanh(m@w)+.1 16x16 (per iter)", ("loops", "fori_matmul16_10k"), ("loops", "fori_matmul16_10k"),
     "time", [], None),
    ("scan 1000 steps f32[16], exec (per step)", ("loops", "scan1000_exec"), ("loops", "scan1000_exec"),
     "time", [], None),
    ("peak RSS, process running the MLP grad bench", ("memory", "mlp_grad_peak_rss"),
     ("memory", "mlp_grad_peak_rss"), "value", [], (1.0, "<= 1.0x JAX")),
    ("  peak RSS growth during that benchmark", ("memory", "mlp_grad_rss_growth"),
     ("memory", "mlp_grad_rss_growth"), "value", [], None),
    ("RSS growth over 100k cached jit calls", ("memory", "rss_growth_100k_calls"),
     ("memory", "rss_growth_100k_calls"), "value", [], ("flat", "flat (< 1 MiB)")),
    ("shard_map psum f32[8,1e6] over 8 devices", ("multidevice", "shard_map_psum"),
     ("multidevice", "shard_map_psum"), "time", [], None),
    ("  its first call (trace+compile+run)", ("multidevice", "shard_map_psum/first_call"),
     ("multidevice", "shard_map_psum/first_call"), "time", [], None),
    ("jit matmul 2048^3, A row-sharded over 8 devices", ("multidevice", "sharded_matmul_2048"),
     ("multidevice", "sharded_matmul_2048"), "rate", L_FMA, (1.0, ">= 1.0x JAX")),
    ("  its first call (trace+compile+run)", ("multidevice", "sharded_matmul_2048/first_call"),
     ("multidevice", "sharded_matmul_2048/first_call"), "time", [], None),
    ("  same matmul on 1 device (8-device process)", ("multidevice", "single_device_matmul_2048_in_8dev_proc"),
     ("multidevice", "single_device_matmul_2048_in_8dev_proc"), "rate", L_FMA, None),
    ("jaxrepl: start to first prompt", ("session", "start_to_prompt"), None, "time", [],
     ("abs", 200.0, "<= 200 ms")),
    ("jaxrepl: trivial cell 1 + 1", ("session", "trivial_cell"), None, "time", [], None),
    ("jaxrepl: first engine cell, new session", ("session", "first_engine_cell"), None, "time", [], None),
]


# ----------------------------------------------------------------------------------------
# running the sides
# ----------------------------------------------------------------------------------------

def boost():
    """Give a measured child the scheduling priority jax_bench.py gives its parts (own
    session and autogroup at nice -20; needs root, silently does what it can), so both
    sides run under the same conditions."""
    try:
        os.setsid()
    except OSError:
        pass
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-20")
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
    except OSError:
        pass


def save(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def load(path):
    with open(path) as f:
        return json.load(f)


def run_ours(binary, quick, timeout, only=None):
    """Our figures (only the parts in `only`, a comma-separated list, if given), or (None, reason)."""
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        return None, ("our bench binary %s is not built (docs/bench.md: "
                      "`cargo build --release --bin bench`)" % binary)
    cmd = [binary] + (["--quick"] if quick else []) + (["--only", only] if only else [])
    print("[bench] running %s ..." % " ".join(cmd), file=sys.stderr, flush=True)
    try:
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, timeout=timeout, preexec_fn=boost)
    except subprocess.TimeoutExpired:
        return None, "%s ran longer than %d s" % (binary, timeout)
    if p.returncode != 0:
        return None, "%s exited with status %d" % (binary, p.returncode)
    try:
        data = json.loads(p.stdout.decode())
    except ValueError as e:
        return None, "%s did not print one JSON object on stdout (%s)" % (binary, e)
    if data.get("schema") != "jaxrepl-bench/2":
        return None, "%s printed schema %r, expected jaxrepl-bench/2" % (binary, data.get("schema"))
    return data, None


def venv_python():
    return os.path.join(ROOT, ".venv-jax", "bin", "python")


def run_jax(shared, quick, timeout, only=JAX_PARTS):
    """JAX's figures and the machine limits from the shared bench script (its parts in `only`),
    or (None, reason)."""
    script = os.path.join(shared, "bench", "jax_bench.py")
    python = venv_python()
    if not os.path.isfile(script):
        return None, "%s not found (is ../shared there?)" % script
    if not os.path.isfile(python):
        return None, "%s not found: run scripts/setup.sh --bench" % python
    cmd = [python, script, "--only", only, "--no-save"]
    if quick:
        cmd += ["--quick", "--reps", "3", "--compile-reps", "3"]
    print("[bench] running jax_bench.py --only %s ..." % only, file=sys.stderr, flush=True)
    # It writes scratch files into its working directory: keep them out of the clone.
    with tempfile.TemporaryDirectory(prefix="jaxrepl-bench-") as tmp:
        try:
            p = subprocess.run(cmd + ["--tmpdir", os.path.join(tmp, "t")], cwd=tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "jax_bench.py ran longer than %d s" % timeout
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace")[-3000:])
        return None, "jax_bench.py exited with status %d" % p.returncode
    try:
        data = json.loads(p.stdout.decode())
    except ValueError as e:
        return None, "jax_bench.py printed no JSON (%s)" % e
    return data, None


# Each workload part runs on our side and then at once on JAX's, so both sides of a row see
# the same machine load (the machine is shared; latency-bound rows such as the scalar loops
# follow the load up to 2x between minutes). The machine limits come next, then our training
# step and memory parts, right before JAX's side of them (run_jax_extra).
PAIRED_PARTS = ["compile", "dispatch", "throughput", "loops", "multidevice"]
OURS_ONLY_PARTS = ["train", "memory"]
JAX_ONLY_PARTS = ["numpy_limits", "stream_c"]


def merge(into, doc):
    """Adds `doc`'s parts (and any top-level key `into` lacks) to `into`; returns `into`."""
    if into is None:
        return doc
    for k, v in doc.items():
        if k == "parts":
            for part, body in v.items():
                into["parts"].setdefault(part, body)
        else:
            into.setdefault(k, v)
    return into


def run_paired(binary, shared, quick, timeout):
    """Both sides part by part, ours first: ((ours, why), (jax, why))."""
    ours = jax = None
    owhy = jwhy = None
    for part in PAIRED_PARTS:
        if owhy is None:
            d, owhy = run_ours(binary, quick, timeout, part)
            if d is not None:
                ours = merge(ours, d)
        if jwhy is None:
            d, jwhy = run_jax(shared, quick, timeout, part)
            if d is not None:
                jax = merge(jax, d)
    if jwhy is None:
        d, jwhy = run_jax(shared, quick, timeout, ",".join(JAX_ONLY_PARTS))
        if d is not None:
            jax = merge(jax, d)
    if owhy is None:
        d, owhy = run_ours(binary, quick, timeout, ",".join(OURS_ONLY_PARTS))
        if d is not None:
            ours = merge(ours, d)
    if ours is not None:
        save(os.path.join(CACHE, "ours.json"), ours)
    if jax is not None:
        save(os.path.join(CACHE, "jax.json"), jax)
    return (ours, owhy), (jax, jwhy)


# JAX's side of our extra figures, with jax_bench.py's own workloads and helpers. Run
# with .venv-jax's python; argv: shared/bench dir, reps, compile reps. Prints one JSON.
JAX_EXTRA = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import jax_bench as jb
reps, creps = int(sys.argv[2]), int(sys.argv[3])
pc = time.perf_counter

def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return float(line.split()[1])

if len(sys.argv) > 4 and sys.argv[4] == "rss_child":
    import jax
    make_fn, args, _ = jb.jax_workloads()["c_mlp_grad"]
    jax.block_until_ready(args)
    before = status_kib("VmHWM:")
    jf = jax.jit(make_fn())
    for _ in range(200):
        jax.block_until_ready(jf(*args))
    print(json.dumps({"vmhwm_before_kib": before, "vmhwm_kib": status_kib("VmHWM:")}))
    sys.exit(0)

import jax
import jax.numpy as jnp
M = {}
make_grad, args, _ = jb.jax_workloads()["c_mlp_grad"]

def make_train():
    g = make_grad()
    def step(p, x, y):
        return jax.tree_util.tree_map(lambda w, gw: w - 0.01 * gw, p, g(p, x, y))
    return step

jax.block_until_ready(jax.jit(make_train())(*args))  # one-time init
tr, lo, co, ex, tot = [], [], [], [], []
for r in range(creps):
    jf = jax.jit(make_train())
    t0 = pc(); traced = jf.trace(*args); t1 = pc(); lowered = traced.lower(); t2 = pc()
    compiled = lowered.compile(); t3 = pc(); jax.block_until_ready(compiled(*args)); t4 = pc()
    tr.append(t1 - t0); lo.append(t2 - t1); co.append(t3 - t2); ex.append(t4 - t3)
    jf2 = jax.jit(make_train())
    t0 = pc(); jax.block_until_ready(jf2(*args)); tot.append(pc() - t0)
steady, inner = jb.bench(lambda: jax.block_until_ready(jf2(*args)), reps, target_s=0.05)
T = {"mlp_train_step/trace": jb.metric("train step: trace", tr, "ms"),
     "mlp_train_step/lower": jb.metric("train step: lower", lo, "ms"),
     "mlp_train_step/compile": jb.metric("train step: XLA compile", co, "ms"),
     "mlp_train_step/first_exec": jb.metric("train step: first execution", ex, "ms"),
     "mlp_train_step/first_call_total": jb.metric("train step: first call total", tot, "ms"),
     "mlp_train_step/steady_exec": jb.metric("train step: steady-state call", steady, "us", inner=inner)}

p = subprocess.run([sys.executable, "-c", "CODE = %r\n" % CODE + CODE, sys.argv[1], "0", "0", "rss_child"],
                   capture_output=True, text=True)
Mem = {}
if p.returncode == 0:
    d = json.loads(p.stdout.strip().splitlines()[-1])
    Mem["mlp_grad_peak_rss"] = dict(label="peak RSS (VmHWM), MLP grad process", unit="MiB",
                                    min=d["vmhwm_kib"] / 1024, median=d["vmhwm_kib"] / 1024,
                                    max=d["vmhwm_kib"] / 1024, n=1)
    g = (d["vmhwm_kib"] - d["vmhwm_before_kib"]) / 1024
    Mem["mlp_grad_rss_growth"] = dict(label="peak RSS growth during MLP grad", unit="MiB",
                                      min=g, median=g, max=g, n=1)
else:
    sys.stderr.write(p.stderr[-2000:])
f1 = jax.jit(lambda v: v + 1.0)
x = jnp.ones((8,), jnp.float32)
for _ in range(1000):
    f1(x).block_until_ready()
r0 = status_kib("VmRSS:")
for _ in range(100000):
    f1(x).block_until_ready()
g = (status_kib("VmRSS:") - r0) / 1024
Mem["rss_growth_100k_calls"] = dict(label="RSS growth over 100k cached jit calls", unit="MiB",
                                    min=g, median=g, max=g, n=1)
print(json.dumps({"parts": {"train": {"metrics": T}, "memory": {"metrics": Mem}}}))
"""


def run_jax_extra(shared, quick, timeout):
    """JAX's training step and memory figures, or (None, reason)."""
    python = venv_python()
    bdir = os.path.join(shared, "bench")
    if not os.path.isfile(python) or not os.path.isfile(os.path.join(bdir, "jax_bench.py")):
        return None, "no .venv-jax or jax_bench.py"
    code = "CODE = %r\n" % JAX_EXTRA + JAX_EXTRA
    reps, creps = ("3", "3") if quick else ("7", "5")
    print("[bench] running JAX's training step and memory figures ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run([python, "-c", code, bdir, reps, creps], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, preexec_fn=boost, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return None, "ran longer than %d s" % timeout
    if p.returncode != 0:
        return None, "exited with status %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-800:])
    try:
        data = json.loads(p.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        return None, "printed no JSON (%s)" % e
    save(os.path.join(CACHE, "jax_extra.json"), data)
    return data, None


# ----------------------------------------------------------------------------------------
# session figures (jaxrepl in a pseudo-terminal)
# ----------------------------------------------------------------------------------------

def _expect(fd, buf, pattern, deadline):
    """Reads from fd until `pattern` (bytes) appears after position 0 of buf[0]; returns
    the time it appeared, or None on timeout/EOF. buf is a one-element list (carried)."""
    while True:
        i = buf[0].find(pattern)
        if i >= 0:
            buf[0] = buf[0][i + len(pattern):]
            return time.perf_counter()
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        r, _, _ = select.select([fd], [], [], min(left, 1.0))
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return None
            if not data:
                return None
            buf[0] += data


def descendants(pid):
    """The process ids below `pid` (from /proc), deepest last."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def kill_tree(pid):
    """Ends a session we started and everything it started (evaluation process, builds)."""
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, 9)
        except OSError:
            pass


def run_session(binary, reps, timeout):
    """jaxrepl start to its first prompt (reps sessions); in the first session, the first
    engine cell typed at the first prompt (it waits for the session's evaluation process and
    engine prelude: what a user sees), then a trivial cell 5 times; or (None, reason). ms.
    The sessions use a build-slot directory of their own ($JAXREPL_BENCH_CACHE_DIR, default
    ~/.cache/jaxrepl-bench), warmed first
    with `jaxrepl --warm` (untimed; the first time it builds the engine, minutes), so that
    the user's slots are never touched and the engine cell measures a warm slot."""
    start, trivial, engine = [], [], []
    notes = {}
    # Outside the clone: a slot inside the workspace directory would be taken for a member.
    cache = os.environ.get("JAXREPL_BENCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxrepl-bench")
    env = dict(os.environ, NO_COLOR="1", JAXREPL_CACHE_DIR=cache)
    warm_ok = True
    # A new slot has no Cargo.lock and would resolve the engine's dependencies online: seed
    # it with the workspace's lock (the same versions; works offline from the local registry).
    slot = os.path.join(env["JAXREPL_CACHE_DIR"], "evcxr", "slot-0")
    if not os.path.exists(os.path.join(slot, "Cargo.lock")) and os.path.isfile(os.path.join(ROOT, "Cargo.lock")):
        os.makedirs(slot, exist_ok=True)
        with open(os.path.join(ROOT, "Cargo.lock")) as src, open(os.path.join(slot, "Cargo.lock"), "w") as dst:
            dst.write(src.read())
    print("[bench] warming the session's build slot (jaxrepl --warm; minutes the first time) ...",
          file=sys.stderr, flush=True)
    w = subprocess.Popen([binary, "--warm"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = w.communicate(timeout=timeout)
        if w.returncode != 0:
            warm_ok = False
            notes["first_engine_cell"] = "jaxrepl --warm failed: %s" % err.decode(errors="replace")[-300:]
    except subprocess.TimeoutExpired:
        kill_tree(w.pid)
        w.wait()
        warm_ok = False
        notes["first_engine_cell"] = "jaxrepl --warm did not finish within %d s (building the engine)" % timeout
    for r in range(reps):
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(binary, [binary], env)
        t0 = time.perf_counter()
        buf = [b""]
        try:
            t = _expect(fd, buf, b"In [1]: ", t0 + 120)
            if t is None:
                return None, "no first prompt within 120 s: %r" % buf[0][-300:]
            start.append(t - t0)
            if r == 0 and warm_ok:
                t1 = time.perf_counter()
                os.write(fd, b"jnp::arange(8.0)\r")
                t = _expect(fd, buf, b"In [2]: ", t1 + timeout)
                if t is None:
                    notes["first_engine_cell"] = "no prompt within %d s" % timeout
                    continue
                engine.append(t - t1)
                for n in range(2, 7):
                    t1 = time.perf_counter()
                    os.write(fd, b"1 + 1\r")
                    t = _expect(fd, buf, ("In [%d]: " % (n + 1)).encode(), t1 + 120)
                    if t is None:
                        break
                    trivial.append(t - t1)
        finally:
            kill_tree(pid)
            os.waitpid(pid, 0)
            os.close(fd)

    def m(label, xs):
        xs = sorted(v * 1e3 for v in xs)
        return dict(label=label, unit="ms", min=xs[0], median=xs[len(xs) // 2], max=xs[-1], n=len(xs))
    out = {"start_to_prompt": m("jaxrepl start to first prompt (engine prelude loads in the background)", start)}
    if trivial:
        out["trivial_cell"] = m("trivial cell 1 + 1 in a warm session (after the engine cell)", trivial)
    if engine:
        out["first_engine_cell"] = m("first engine cell jnp::arange(8.0) in a new session", engine)
    for k, v in notes.items():
        print("[bench] session: %s: %s" % (k, v), file=sys.stderr)
    return {"parts": {"session": {"metrics": out, "notes": notes}}, "binary": binary}, None


# ----------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------

def get(doc, part, key):
    if doc is None or part is None:
        return None
    v = doc.get("parts", {}).get(part, {}).get("metrics", {}).get(key)
    return v if isinstance(v, dict) else None


def figure(m, kind):
    """(value, unit) of a metric for the table."""
    if m is None:
        return None, ""
    if kind == "rate" and "rate_at_median" in m:
        return m["rate_at_median"], m.get("rate_unit", "")
    return m.get("median"), m.get("unit", "")


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1 or a == 0:
        return "%.2f" % v
    return "%.3g" % v


def note_of(doc, part, key):
    return ((doc or {}).get("parts", {}).get(part, {}).get("notes", {}) or {}).get(key)


def build_rows(ours, jax, extra, session):
    """The table's rows as lists of strings, plus the notes to print under it."""
    out, notes = [], []
    sides = {"train": extra, "memory": extra}
    for label, okey, jkey, kind, limits, target in ROWS:
        src = session if okey[0] == "session" else ours
        om = get(src, *okey)
        jm = get(sides.get(jkey[0], jax), *jkey) if jkey else None
        o, unit = figure(om, kind)
        j, junit = figure(jm, kind)
        unit = unit or junit
        ratio = o / j if o is not None and j else None
        lim = []
        for part, key, lkind, llabel in limits:
            lm = get(jax, part, key)
            if lm is not None:
                v = lm.get("rate_at_min") if lkind == "rate" else lm.get("median")
                lim.append("%s %s %s" % (llabel, fmt(v), lm.get("rate_unit", "") if lkind == "rate" else lm.get("unit", "")))
        met = ""
        tgt = ""
        if target:
            if target[0] == "abs":
                tgt = target[2]
                met = "-" if o is None else ("yes" if o <= target[1] else "no")
            elif target[0] == "flat":
                tgt = target[1]
                met = "-" if o is None else ("yes" if o < 1.0 else "no")
            else:
                tgt = target[1]
                if ratio is not None:
                    good = ratio >= target[0] if kind == "rate" else ratio <= target[0]
                    met = "yes" if good else "no"
                else:
                    met = "-"
        why = note_of(src, *okey) if src is not None else None
        if why:
            notes.append("%s: %s%s" % (label.strip(), "not measured -- " if om is None else "", why))
        out.append(["%s (%s)" % (label, unit) if unit else label, fmt(o), fmt(j),
                    "%.2f" % ratio if ratio is not None else "-", "; ".join(lim), tgt, met])
    return out, notes


HEAD = ["figure", "ours", "JAX", "ratio", "machine limit (same run)", "target", "met"]


def text_table(rows):
    w = [max(len(HEAD[i]), *(len(r[i]) for r in rows)) for i in range(len(HEAD))]
    line = lambda r: "  ".join(c.ljust(w[i]) if i in (0, 4, 5) else c.rjust(w[i]) for i, c in enumerate(r))
    return "\n".join([line(HEAD), "-" * (sum(w) + 2 * (len(w) - 1))] + [line(r) for r in rows])


def md_table(rows):
    L = ["| " + " | ".join(HEAD) + " |", "|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        L.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    return "\n".join(L)


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(jax, load_start, load_end, started):
    h = (jax or {}).get("host", {})
    cpu = h.get("cpu_model")
    if not cpu:
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
        except OSError:
            cpu = "?"
    lines = [
        "- Date: %s (UTC); host %s" % (started, platform.node()),
        "- CPU: %s, %s logical CPUs (%s); SIMD: %s" % (cpu, os.cpu_count(), h.get("hypervisor") or "no hypervisor reported",
                                                        " ".join(h.get("simd_flags_present", [])) or "?"),
        "- Memory: %.1f GiB; kernel %s" % (h.get("mem_total_kib", 0) / 2 ** 20, platform.release()),
        "- Load average (1/5/15 min) at start: %s; at end: %s" % (
            " ".join("%.2f" % v for v in load_start), " ".join("%.2f" % v for v in load_end)),
        "- JAX %s / jaxlib %s, numpy %s, Python %s" % (h.get("jax_version", "?"), h.get("jaxlib_version", "?"),
                                                        h.get("numpy_version", "?"), h.get("python", "?")),
        "- jaxrepl commit %s; %s; LLVM/MLIR %s" % (sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]) or "?",
                                                   sh(["rustc", "--version"]) or "rustc ?",
                                                   sh(["/usr/lib/llvm-22/bin/llvm-config", "--version"]) or "?"),
    ]
    parts = (jax or {}).get("parts", {})
    busy = ["%s %.0f%%" % (p, 100 * parts[p]["others_cpu_share"]) for p in parts
            if isinstance(parts[p].get("others_cpu_share"), (int, float))]
    if busy:
        lines.append("- Share of the CPUs used by other processes during JAX's parts: %s" % ", ".join(busy))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"),
                    help="the shared directory (default: ../shared from the repository root)")
    ap.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.expanduser("~"), ".cache/jaxrepl/target"),
        "release", "bench"), help="our bench binary")
    ap.add_argument("--ours-json", help="read our figures from this file instead of running --bin")
    ap.add_argument("--skip-jax", action="store_true", help="reuse .cache/bench/jax*.json from an earlier run")
    ap.add_argument("--jax-json", help="read JAX's figures from this file (jax_bench.py output)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions on both sides")
    ap.add_argument("--no-session", action="store_true", help="skip the jaxrepl session figures")
    ap.add_argument("--session-timeout", type=int, default=900,
                    help="seconds allowed to jaxrepl --warm and to the first engine cell (default 900)")
    ap.add_argument("--write-doc", action="store_true",
                    help="write docs/performance.md also from saved outputs (re-rendering a full run)")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/performance.md")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds allowed to each side")
    a = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_start = os.getloadavg()

    problems = []
    jax_json = a.jax_json or (os.path.join(CACHE, "jax.json") if a.skip_jax else None)
    if not a.ours_json and not jax_json:
        (ours, why), (jax, jwhy) = run_paired(a.bin, a.shared, a.quick, a.timeout)
    else:
        if a.ours_json:
            ours, why = load(a.ours_json), None
        else:
            ours, why = run_ours(a.bin, a.quick, a.timeout)
            if ours is not None:
                save(os.path.join(CACHE, "ours.json"), ours)
        if jax_json:
            jax, jwhy = (load(jax_json), None) if os.path.isfile(jax_json) else (None, "%s not found" % jax_json)
        else:
            jax, jwhy = run_jax(a.shared, a.quick, a.timeout)
            if jax is not None:
                save(os.path.join(CACHE, "jax.json"), jax)
    if why:
        problems.append("ours: " + why)
    if jwhy:
        problems.append("JAX: " + jwhy)
    xpath = os.path.join(CACHE, "jax_extra.json")
    if a.skip_jax or a.jax_json:
        extra, xwhy = (load(xpath), None) if os.path.isfile(xpath) else (None, "%s not found" % xpath)
    else:
        extra, xwhy = run_jax_extra(a.shared, a.quick, a.timeout)
    if xwhy:
        problems.append("JAX training step / memory: " + xwhy)

    session = None
    rbin = os.environ.get("JAXREPL_BIN")
    if a.no_session:
        pass
    elif rbin and os.access(rbin, os.X_OK):
        print("[bench] running %s for the session figures ..." % rbin, file=sys.stderr, flush=True)
        session, swhy = run_session(rbin, 3 if a.quick else 5, a.session_timeout)
        if swhy:
            problems.append("session: " + swhy)
    else:
        problems.append("session: $JAXREPL_BIN is not an executable jaxrepl (make bench sets it)")
    load_end = os.getloadavg()

    rows, notes = build_rows(ours, jax, extra, session)
    mach = machine(jax, load_start, load_end, started)
    print("\n".join(mach))
    print(text_table(rows))
    for n in notes:
        print("note: " + n)
    for p in problems:
        print("NOT MEASURED -- " + p)

    full = not (a.quick or a.skip_jax or a.jax_json or a.ours_json) or a.write_doc
    if full and not a.no_doc and ours is not None and jax is not None:
        L = ["# Performance: jaxrepl beside JAX 0.10 on this machine", "",
             "Generated by `make bench` (`scripts/bench.py`) on every full run; do not edit by hand.",
             "Both sides ran in the same run, each measured workload with the same shapes, dtypes and",
             "work counts (docs/bench.md). `ratio` is ours / JAX of the figure shown: for times below 1",
             "is faster, for rates (GB/s, GFLOP/s) above 1 is faster. `machine limit` is the machine's",
             "figure measured in the same run (numpy/OpenBLAS and C STREAM parts of jax_bench.py; rates",
             "at their best repetition). `target` is issue 4's. The machine is shared with other work:",
             "see the load average.", "", "## Machine", ""] + mach + ["", "## Figures", "", md_table(rows)]
        if notes or problems:
            L += ["", "## Notes and figures not measured", ""] + ["- " + n for n in notes] + ["- " + p for p in problems]
        with open(DOC, "w") as f:
            f.write("\n".join(L) + "\n")
        print("[bench] wrote %s" % DOC, file=sys.stderr)
    if ours is None:
        return 2
    return 1 if jax is None else 0


if __name__ == "__main__":
    sys.exit(main())
