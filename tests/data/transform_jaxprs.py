"""Captures JAX's jaxprs of transformations for tests/tests/golden_transforms.rs.

Run with jax 0.10.2 (x64 off):
    python tests/data/transform_jaxprs.py > tests/data/transform_jaxprs.txt
Each case is `=== name` followed by `jax.make_jaxpr(fn)(*args)` for the function and
arguments below; `jit/NAME` is the same transformation wrapped in `jax.jit`. The Rust
test builds the same functions with our API and compares (see its comments for the
differences that are by design).
"""
import jax
import jax.numpy as jnp
from jax import lax

X3 = jnp.array([0.5, -1.0, 2.0], jnp.float32)
M23 = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)


def f(x):
    return jnp.sin(x) * x


def loss(x):
    return f(x).sum()


@jax.custom_jvp
def log1pexp(x):
    return jnp.log(jnp.exp(x) + 1.0)


@log1pexp.defjvp
def log1pexp_jvp(p, t):
    (x,), (tx,) = p, t
    return log1pexp(x), (1.0 - 1.0 / (jnp.exp(x) + 1.0)) * tx


@jax.custom_vjp
def clip_grad(x):
    return x


clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))


def layer(x):
    return jnp.sin(jnp.tanh(x))


# Each case is a function named after it (jit names its equation after the function).
def jvp(x, t):
    return jax.jvp(f, (x,), (t,))


def vjp(x, u):
    out, back = jax.vjp(f, x)
    return out, back(u)[0]


def grad(x):
    return jax.grad(loss)(x)


def value_and_grad_has_aux(x):
    return jax.value_and_grad(lambda x: (loss(x), jnp.cos(x)), has_aux=True)(x)


def jacfwd(x):
    return jax.jacfwd(f)(x)


def jacrev(x):
    return jax.jacrev(f)(x)


def hessian(x):
    return jax.hessian(loss)(x)


def vmap_in_out_axes(m, v):
    return jax.vmap(lambda c, s: c * s, in_axes=(1, 0), out_axes=1)(m, v)


def vmap_cond(x):
    return jax.vmap(lambda x: lax.cond(x > 0.0, jnp.sin, jnp.cos, x))(x)


def custom_jvp(x):
    return log1pexp(x)


def grad_custom_jvp(x):
    return jax.grad(lambda x: log1pexp(x).sum())(x)


def custom_vjp(x):
    return clip_grad(x)


def grad_custom_vjp(x):
    return jax.grad(lambda x: (clip_grad(x) * 5.0).sum())(x)


def checkpoint(x):
    return jax.checkpoint(layer)(x)


def grad_checkpoint(x):
    return jax.grad(lambda x: jax.checkpoint(layer)(x).sum())(x)


CASES = [
    (jvp, (X3, X3)),
    (vjp, (X3, X3)),
    (grad, (X3,)),
    (value_and_grad_has_aux, (X3,)),
    (jacfwd, (X3,)),
    (jacrev, (X3,)),
    (hessian, (X3,)),
    (vmap_in_out_axes, (M23, X3)),
    (vmap_cond, (X3,)),
    (custom_jvp, (X3,)),
    (grad_custom_jvp, (X3,)),
    (custom_vjp, (X3,)),
    (grad_custom_vjp, (X3,)),
    (checkpoint, (X3,)),
    (grad_checkpoint, (X3,)),
]

if __name__ == "__main__":
    print(f"# jax {jax.__version__}")
    for fn, args in CASES:
        for prefix, g in (("", fn), ("jit/", jax.jit(fn))):
            print(f"=== {prefix}{fn.__name__}")
            print(jax.make_jaxpr(g)(*args))
