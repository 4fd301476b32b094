"""Sharded JAX training: functools.partial(jax.jit, ...), pjit with shardings, a mesh."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pjit import pjit
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def forward(params, x):
    h = jnp.tanh(x @ params["w1"])
    return h @ params["w2"]


@functools.partial(jax.jit, static_argnums=(2,), donate_argnums=(0,))
def sgd_step(params, batch, training):
    def loss_fn(p):
        pred = forward(p, batch["x"])
        err = (pred - batch["y"]) ** 2
        return err.mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    if training:
        params = jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads)
    return params, loss


def select_tokens(logits, tokens):
    chosen = jnp.nonzero(tokens > 0, size=tokens.shape[0], fill_value=0)[0]
    picked = jnp.nonzero(tokens > 0)[0]
    return logits[chosen], picked


def make_sharded_step(mesh):
    data = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    return pjit(select_tokens, in_shardings=(data, data), out_shardings=(data, replicated))


def main():
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    params = {"w1": jnp.zeros((16, 32)), "w2": jnp.zeros((32, 1))}
    step = make_sharded_step(mesh)
    for i in range(100):
        batch = {"x": np.random.rand(8, 16), "y": np.random.rand(8, 1)}
        params, loss = sgd_step(params, batch, True)
        step(jnp.ones((8, 4)), jnp.arange(8))
        if i % 25 == 0:
            print(i, float(loss))
