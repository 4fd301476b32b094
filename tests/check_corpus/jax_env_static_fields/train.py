"""A reinforcement-learning environment written for JAX: its parameters are a flax struct whose settings are
static fields (compile-time constants), next to one traced field. Run: python train.py"""

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Params:
    horizon: int = struct.field(pytree_node=False, default=200)
    shaped: bool = struct.field(pytree_node=False, default=False)
    friction: float = 0.1


@struct.dataclass
class State:
    x: jax.Array
    t: jax.Array


@jax.jit
def step(state, push, params):
    x = state.x + push - params.friction * state.x
    reward = -jnp.abs(x)
    if params.shaped:
        reward = reward - 0.01 * state.t
    if params.horizon > 100:
        done = state.t >= params.horizon
    else:
        done = state.t >= 100
    if params.friction > 0.5:
        x = x * 0.5
    return State(x, state.t + 1), reward, done


if __name__ == "__main__":
    state, params = State(jnp.zeros(()), jnp.zeros((), jnp.int32)), Params()
    for _ in range(10):
        state, reward, done = step(state, 1.0, params)
