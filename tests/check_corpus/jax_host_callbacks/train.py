"""A jitted PPO-style update that sends its metrics to the host from inside the step."""
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.experimental import io_callback


@dataclass(frozen=True)
class Config:
    lr: float = 3e-4
    debug: bool = False


CONFIG = Config()


def report(metrics):
    print({name: float(value) for name, value in metrics.items()})


@jax.jit
def update(params, batch):
    def loss_fn(p):
        return jnp.mean((batch["x"] @ p - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    params = params - CONFIG.lr * grads
    io_callback(report, None, {"loss": loss})
    jax.experimental.io_callback(report, None, {"grad_norm": jnp.linalg.norm(grads)})
    if CONFIG.debug:
        jax.debug.print("loss {}", loss)
    return params, loss


def main():
    params = jnp.zeros((8,))
    batch = {"x": jnp.ones((32, 8)), "y": jnp.ones((32,))}
    for _ in range(10):
        params, loss = update(params, batch)


if __name__ == "__main__":
    main()
