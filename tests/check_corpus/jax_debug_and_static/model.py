"""A two-layer MLP in plain JAX (parameters are a dict of arrays)."""
import jax
import jax.numpy as jnp


def init_params(key, sizes=(784, 512, 10), dtype=jnp.float32):
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (a, b), dtype) * 0.02, "b": jnp.zeros((b,), dtype)}
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def apply(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]
