"""JAX loops inside the step: lax.scan over micro-batches, lax.fori_loop for inner updates."""
import jax
import jax.numpy as jnp


def micro_step(carry, micro_batch):
    params, total = carry
    grads = jax.grad(lambda p: jnp.mean((micro_batch["x"] @ p - micro_batch["y"]) ** 2))(params)
    if jnp.any(jnp.isnan(grads)):
        grads = jnp.zeros_like(grads)
    return (params, total + grads), None


@jax.jit
def accumulate(params, micro_batches):
    (params, total), _ = jax.lax.scan(micro_step, (params, jnp.zeros_like(params)), micro_batches)
    return params - 0.01 * total / micro_batches["x"].shape[0]


def inner(i, params):
    print("inner update", params)
    return params * 0.99


@jax.jit
def shrink(params, n):
    return jax.lax.fori_loop(0, 10, inner, params)


def train(params, data, steps):
    for step in range(steps):
        params = accumulate(params, data)
        params = shrink(params, 10)
        if step % 10 == 0:
            print(step, jnp.linalg.norm(params))
    return params
