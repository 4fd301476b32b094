"""A small JAX classifier whose last batch of each epoch is short: a new shape, a new compilation."""
import os

import jax
import jax.numpy as jnp
import numpy as np


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (784, 10)) * 0.01, "b": jnp.zeros((10,)), "k": jax.random.normal(k2, ())}


@jax.jit
def train_step(params, batch):
    def loss_fn(p):
        logits = batch["image"].reshape(batch["image"].shape[0], -1) @ p["w"] + p["b"]
        labels = jax.nn.one_hot(batch["label"], 10)
        return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return params, loss


def batches(images, labels, batch_size):
    for start in range(0, len(images), batch_size):
        yield {"image": images[start: start + batch_size], "label": labels[start: start + batch_size]}


def main():
    max_steps = int(os.environ.get("TPUOPS_MAX_STEPS", "1000"))
    rng = np.random.default_rng(0)
    images = rng.random((250, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, size=250)
    params = init(jax.random.PRNGKey(0))
    step = 0
    for epoch in range(100):
        size = 64 - 8 * (epoch % 4)
        for batch in batches(images, labels, size):
            params, loss = train_step(params, batch)
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss {float(loss):.4f}", flush=True)
            if step >= max_steps:
                return


if __name__ == "__main__":
    main()
