"""Captures JAX's type promotion table for tests/tests/promotion.rs.

Run with jax 0.10.2:  python tests/data/promotion_reference.py > tests/data/promotion_reference.json
For each mode (jax_enable_x64 off and on, each in a fresh process) and each pair of
operands from {bool, u8, u32, i8, i16, i32, i64, bf16, f16, f32, f64 (strong arrays),
i* (Python int), f* (Python float)}: `jnp.promote_types` (strong pairs) and the dtype
and weak_type of `x + y`. Under x64 off, strong i64/f64 cannot be made, so those rows
are absent there.
"""
import json
import subprocess
import sys

NAMES = ["bool", "uint8", "uint32", "int8", "int16", "int32", "int64", "bfloat16", "float16", "float32", "float64"]


def table(x64):
    import jax
    jax.config.update("jax_enable_x64", x64)
    import jax.numpy as jnp

    def make(n):
        if n == "i*":
            return 1
        if n == "f*":
            return 1.0
        return jnp.zeros((), n)

    ops = NAMES + ["i*", "f*"]
    if not x64:
        ops = [n for n in ops if n not in ("int64", "float64")]
    rows = []
    for a in ops:
        for b in ops:
            r = jnp.add(make(a), make(b))
            row = {"a": a, "b": b, "dtype": r.dtype.name, "weak_type": bool(r.weak_type)}
            if "*" not in a and "*" not in b:
                row["promote_types"] = jnp.promote_types(a, b).name
            rows.append(row)
    return {"jax_version": jax.__version__, "x64": x64, "rows": rows}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(table(sys.argv[1] == "on")))
    else:
        runs = [json.loads(subprocess.check_output([sys.executable, __file__, m])) for m in ("off", "on")]
        print(json.dumps({"x64_off": runs[0], "x64_on": runs[1]}, indent=0))
