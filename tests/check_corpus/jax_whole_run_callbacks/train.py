"""A whole PPO-style run in one jitted function: updates are scanned, metrics leave through host callbacks."""
from functools import partial

import jax
import jax.numpy as jnp

UPDATES = 1000
RENDER_EVERY = 50


def write_metrics(metrics, update):
    print(f"update {int(update)}: loss {float(metrics['loss']):.4f}")


def make_train(lr: float):
    def train(key):
        params = jnp.zeros(8)

        def save_frames(frames, update):
            jax.debug.print("saving {n} frames at update {u}", n=frames.shape[0], u=update)

        def _update_step(carry, _):
            params, key, update = carry
            key, sub = jax.random.split(key)
            batch = jax.random.normal(sub, (64, 8))

            def loss_fn(p):
                return jnp.mean((batch @ p) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(params)
            params = params - lr * grads
            jax.debug.callback(write_metrics, {"loss": loss}, update)
            frames = jnp.tile(batch[None], (4, 1, 1))
            jax.lax.cond(update % RENDER_EVERY == 0, partial(jax.debug.callback, save_frames),
                         lambda *_: None, frames, update)
            return (params, key, update + 1), loss

        (params, key, _), losses = jax.lax.scan(_update_step, (params, key, 0), None, UPDATES)
        jax.debug.callback(write_metrics, {"loss": losses[-1]}, UPDATES)
        return params, losses

    return train


if __name__ == "__main__":
    run = jax.jit(make_train(1e-3))
    out = run(jax.random.PRNGKey(0))
    jax.block_until_ready(out)
