"""A pjit-style JAX trainer whose step is full of Python decisions taken at trace time (helpers that answer
from the mesh, flags with defaults, settings bound by functools.partial, optional fields of the train state,
jnp.log), next to one real branch on a traced value."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import mesh_utils
from jax.sharding import Mesh, PartitionSpec

from helpers import axis_names_of, names_in_mesh


def constrain(x, spec):
    if names_in_mesh(*axis_names_of(spec)):
        x = jax.lax.with_sharding_constraint(x, spec)
    return x


def smoothed_xent(logits, labels, smoothing):
    confidence = 1.0 - smoothing
    log_probs = jnp.log(jax.nn.softmax(logits))
    onehot = jax.nn.one_hot(labels, logits.shape[-1]) * confidence
    return -(onehot * log_probs).sum(-1).mean()


def block_bias(chunk, causal, deterministic, dropout_rate, index):
    bias = jnp.zeros((chunk, chunk))
    if causal:
        bias = bias + jnp.triu(jnp.full((chunk, chunk), -1e9), 1)
    if not deterministic and dropout_rate > 0.0:
        bias = bias * (1.0 - dropout_rate)
    return bias + index


def train_step(state, batch, smoothing=0.1, skip_hooks=False):
    bias_fn = functools.partial(block_bias, 128, True, False, 0.1)
    biases = jax.vmap(bias_fn)(jnp.arange(4))

    def loss_fn(params):
        logits = state.apply_fn(params, constrain(batch["inputs"], PartitionSpec("data")), biases)
        return smoothed_xent(logits, batch["labels"], smoothing)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    if state.dynamic_scale:
        grads = state.dynamic_scale.scale(grads)
    new_state = state.apply_gradients(grads=grads)
    if not skip_hooks:
        new_state = new_state.replace(step=new_state.step + 1)
    if jnp.isnan(loss):
        new_state = state
    return new_state, loss


mesh = Mesh(mesh_utils.create_device_mesh((jax.device_count(),)), ("data",))
p_train_step = jax.jit(train_step, donate_argnums=(0,))
