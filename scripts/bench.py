#!/usr/bin/env python3
"""scripts/bench.py -- our engine and session side by side with JAX, in one table.

Runs our bench binary (JSON on stdout, keys in docs/bench.md) and
../shared/bench/jax_bench.py --only compile,dispatch under .venv-jax, then prints
    figure | ours | JAX | ratio (ours / JAX)
Raw outputs are kept in .cache/bench/{ours,jax}.json. Stdlib only.
Exit status: 0 when both sides ran, 2 when our figures are missing (the table says
which), 1 when the JAX side failed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "bench")

# (our key, label, unit, JAX part, JAX metric) -- see docs/bench.md
ROWS = [
    ("jit_cached_call_f32_8_us", "cached jit call f32[8], call+block", "us",
     "dispatch", "jit_1arg_sync"),
    ("eager_sin_f32_8_us", "eager sin f32[8], call+block", "us",
     "dispatch", "eager_sin_sync"),
    ("first_call_sin_f32_1024_trace_ms", "first call sin(x)*2+1 f32[1024]: trace", "ms",
     "compile", "a_elementwise/trace"),
    ("first_call_sin_f32_1024_lower_ms", "  lower", "ms",
     "compile", "a_elementwise/lower"),
    ("first_call_sin_f32_1024_compile_ms", "  compile", "ms",
     "compile", "a_elementwise/compile"),
    ("first_call_sin_f32_1024_first_exec_ms", "  first execution", "ms",
     "compile", "a_elementwise/first_exec"),
    ("first_call_sin_f32_1024_total_ms", "  total, fresh jit(f)(x)", "ms",
     "compile", "a_elementwise/first_call_total"),
    ("session_trivial_cell_ms", "jaxrepl: trivial cell wall time", "ms", None, None),
    ("session_first_engine_cell_s", "jaxrepl: first engine cell, new session", "s", None, None),
]


def median_of(v):
    """A metric is a bare number or an object with 'median' (docs/bench.md)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, dict) and isinstance(v.get("median"), (int, float)):
        return float(v["median"])
    return None


def run_ours(binary, timeout):
    """Our figures, or (None, reason)."""
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        return None, ("our bench binary %s is not built (docs/bench.md: "
                      "`cargo build --release --bin bench`)" % binary)
    print("[bench] running %s ..." % binary, file=sys.stderr, flush=True)
    try:
        p = subprocess.run([binary], cwd=ROOT, stdout=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "%s ran longer than %d s" % (binary, timeout)
    if p.returncode != 0:
        return None, "%s exited with status %d" % (binary, p.returncode)
    try:
        data = json.loads(p.stdout.decode())
    except ValueError as e:
        return None, "%s did not print one JSON object on stdout (%s)" % (binary, e)
    save(os.path.join(CACHE, "ours.json"), data)
    return data, None


def run_jax(shared, quick, timeout):
    """JAX's figures from the shared bench script, or (None, reason)."""
    script = os.path.join(shared, "bench", "jax_bench.py")
    python = os.path.join(ROOT, ".venv-jax", "bin", "python")
    if not os.path.isfile(script):
        return None, "%s not found (is ../shared there?)" % script
    if not os.path.isfile(python):
        return None, "%s not found: run scripts/setup.sh --bench" % python
    cmd = [python, script, "--only", "compile,dispatch", "--no-save"]
    if quick:
        cmd += ["--quick", "--reps", "3", "--compile-reps", "3"]
    print("[bench] running %s (about a minute) ..." % " ".join(cmd[1:]), file=sys.stderr, flush=True)
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
    save(os.path.join(CACHE, "jax.json"), data)
    return data, None


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def jax_value(jax, part, key):
    if jax is None or part is None:
        return None
    return median_of(jax.get("parts", {}).get(part, {}).get("metrics", {}).get(key))


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.3g" % v


def table(ours, jax):
    metrics = (ours or {}).get("metrics", {})
    lines = ["%-46s %10s %10s %7s" % ("figure", "ours", "JAX", "ratio")]
    lines.append("-" * len(lines[0]))
    for key, label, unit, part, jkey in ROWS:
        o = median_of(metrics.get(key))
        j = jax_value(jax, part, jkey)
        ratio = "%.2f" % (o / j) if o is not None and j else ("n/a" if part is None else "-")
        lines.append("%-46s %10s %10s %7s" % ("%s (%s)" % (label, unit), fmt(o), fmt(j), ratio))
    known = {r[0] for r in ROWS}
    extra = sorted(k for k in metrics if k not in known)
    if extra:
        lines.append("")
        lines.append("more figures from our bench binary:")
        for k in extra:
            lines.append("  %-44s %10s" % (k, fmt(median_of(metrics[k]))))
    notes = (ours or {}).get("notes")
    if notes:
        lines.append("")
        lines.append("notes from our bench binary:")
        for k, v in sorted(notes.items()):
            lines.append("  %s: %s" % (k, v))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"),
                    help="the shared directory (default: ../shared from the repository root)")
    ap.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.expanduser("~"), ".cache/jaxrepl/target"),
        "release", "bench"), help="our bench binary")
    ap.add_argument("--ours-json", help="read our figures from this file instead of running --bin")
    ap.add_argument("--skip-jax", action="store_true", help="reuse .cache/bench/jax.json from an earlier run")
    ap.add_argument("--jax-json", help="read JAX's figures from this file (jax_bench.py output)")
    ap.add_argument("--quick", action="store_true", help="fewer JAX repetitions")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed to each side")
    a = ap.parse_args()

    problems = []
    if a.ours_json:
        ours, why = load(a.ours_json), None
    else:
        ours, why = run_ours(a.bin, a.timeout)
    if why:
        problems.append("ours: " + why)

    jax_json = a.jax_json or (os.path.join(CACHE, "jax.json") if a.skip_jax else None)
    if jax_json:
        jax, jwhy = (load(jax_json), None) if os.path.isfile(jax_json) else (None, "%s not found" % jax_json)
    else:
        jax, jwhy = run_jax(a.shared, a.quick, a.timeout)
    if jwhy:
        problems.append("JAX: " + jwhy)

    if jax is not None:
        h = jax.get("host", {})
        c = jax.get("parts", {}).get("compile", {})
        print("JAX side: jax %s, jaxlib %s, run %s; load average before/after its compile part %.2f/%.2f" % (
            h.get("jax_version", "?"), h.get("jaxlib_version", "?"), jax.get("started", "?"),
            c.get("load_before", float("nan")), c.get("load_after", float("nan"))))
    print(table(ours, jax))
    for p in problems:
        print("NOT MEASURED -- " + p)
    if ours is None:
        return 2
    return 1 if jax is None else 0


if __name__ == "__main__":
    sys.exit(main())
