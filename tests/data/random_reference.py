"""Captures reference values from JAX for tests/tests/random.rs.

Run with jax 0.10.2 (CPU):  python tests/data/random_reference.py > tests/data/random_reference.json
Floats are written as the exact float64 value of the float32 (or bfloat16/float16)
result, so the Rust side compares bit for bit.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np

assert jax.__version__ == "0.10.2", jax.__version__
K = jax.random.key
kd = lambda k: np.asarray(jax.random.key_data(k)).tolist()
# JSON has no infinities: they are written as the strings "inf" / "-inf".
fl = lambda a: [float(v) if np.isfinite(v) else str(float(v)) for v in np.asarray(a, dtype=np.float32).ravel()]
ints = lambda a: [int(v) for v in np.asarray(a).ravel()]
shp = lambda a: list(np.shape(a))

out = {"jax_version": jax.__version__, "threefry_partitionable": bool(jax.config.jax_threefry_partitionable)}
out["key_data"] = [{"seed": s, "data": kd(K(s))} for s in [0, 1, 42, -1, 2**31 - 1, -(2**31)]]
out["split"] = [{"seed": s, "num": n, "data": kd(jax.random.split(K(s), n))} for s, n in [(0, 2), (42, 3), (7, 1), (1, 5)]]
out["fold_in"] = [{"seed": s, "data_in": d, "data": kd(jax.random.fold_in(K(s), d))} for s, d in [(0, 1), (42, 7), (0, 0), (3, 2**31 - 1), (5, 2**32 - 3)]]
out["bits"] = [{"seed": s, "shape": list(sh), "values": ints(jax.random.bits(K(s), sh, jnp.uint32))} for s, sh in [(0, (5,)), (1, (2, 3)), (2, ())]]
out["uniform"] = []
for s, sh, lo, hi in [(0, (3,), 0.0, 1.0), (42, (2, 3), 0.0, 1.0), (1, (), 0.0, 1.0), (3, (7,), -2.0, 5.0), (4, (0,), 0.0, 1.0)]:
    out["uniform"].append({"seed": s, "shape": list(sh), "minval": lo, "maxval": hi, "dtype": "float32",
                           "values": fl(jax.random.uniform(K(s), sh, jnp.float32, lo, hi))})
for s, dt in [(0, jnp.bfloat16), (5, jnp.float16)]:
    out["uniform"].append({"seed": s, "shape": [6], "minval": 0.0, "maxval": 1.0, "dtype": jnp.dtype(dt).name,
                           "values": fl(jax.random.uniform(K(s), (6,), dt))})
out["normal"] = [{"seed": s, "shape": list(sh), "values": fl(jax.random.normal(K(s), sh))} for s, sh in [(0, (5,)), (1, (2, 3)), (9, (64,))]]
out["bernoulli"] = [{"seed": s, "p": p, "shape": list(sh), "values": ints(jax.random.bernoulli(K(s), p, sh))} for s, p, sh in [(0, 0.5, (10,)), (1, 0.3, (2, 5)), (2, 0.9, ())]]
out["randint"] = [{"seed": s, "shape": list(sh), "minval": lo, "maxval": hi, "dtype": "int32",
                   "values": ints(jax.random.randint(K(s), sh, lo, hi))}
                  for s, sh, lo, hi in [(0, (6,), 0, 10), (3, (2, 4), -5, 5), (1, (5,), 0, 2**31 - 1), (2, (4,), 7, 7), (4, (3,), -(2**31), 2**31 - 1)]]
out["permutation"] = [{"seed": s, "n": n, "values": ints(jax.random.permutation(K(s), n))} for s, n in [(0, 10), (1, 5), (2, 1), (3, 100)]]
x2 = jnp.arange(12).reshape(4, 3)
out["permutation_2d"] = {"seed": 0, "x": ints(x2), "shape": [4, 3], "values": ints(jax.random.permutation(K(0), x2))}
logits1 = jnp.array([0.1, 0.5, 1.0, 2.0])
logits2 = jnp.array([[0.0, 1.0, 2.0, 3.0, -1.0], [3.0, 2.0, 1.0, 0.0, 5.0]])
out["categorical"] = [
    {"seed": 0, "logits": fl(logits1), "logits_shape": [4], "axis": -1, "shape": [8], "values": ints(jax.random.categorical(K(0), logits1, shape=(8,)))},
    {"seed": 1, "logits": fl(logits2), "logits_shape": [2, 5], "axis": -1, "shape": None, "values": ints(jax.random.categorical(K(1), logits2))},
    {"seed": 2, "logits": fl(logits2), "logits_shape": [2, 5], "axis": -1, "shape": [3, 2], "values": ints(jax.random.categorical(K(2), logits2, shape=(3, 2)))},
]
out["truncated_normal"] = [{"seed": s, "lower": lo, "upper": hi, "shape": list(sh), "values": fl(jax.random.truncated_normal(K(s), lo, hi, sh))}
                           for s, lo, hi, sh in [(0, -1.0, 2.0, (6,)), (1, -2.0, 2.0, (2, 3)), (2, 0.5, 3.0, (8,))]]
# vmap over keys and jit: same values as the plain calls.
ks = jax.random.split(K(11), 4)
out["vmap_uniform"] = {"seed": 11, "num": 4, "shape": [3], "values": fl(jax.vmap(lambda k: jax.random.uniform(k, (3,)))(ks))}
# primitives the generators stand on
xs = np.linspace(-1, 1, 41, dtype=np.float32)
out["erf_inv"] = {"x": fl(xs), "values": fl(jax.lax.erf_inv(xs))}
print(json.dumps(out, indent=1))
