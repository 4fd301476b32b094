"""A JAX classifier trained two ways: a jitted step that prints its loss with jax.debug.print (a callback to
the host on every step) next to a plain print (which runs once, while tracing), and a pmapped step whose
static bool argument chooses, at compile time, whether to apply weight decay."""
import functools

import jax
import jax.numpy as jnp
import optax

from model import apply, init_params

optimizer = optax.adamw(1e-3)


def loss_fn(params, images, labels):
    logits = apply(params, images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@jax.jit
def train_step(params, opt_state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
    jax.debug.print("loss {l}", l=loss)
    print(loss)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@functools.partial(jax.pmap, axis_name="devices", static_broadcasted_argnums=(4,))
def parallel_step(params, opt_state, images, labels, decay: bool):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
    grads = jax.lax.pmean(grads, "devices")
    if decay:
        grads = jax.tree_util.tree_map(lambda g, p: g + 1e-4 * p, grads, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(loss, "devices")


def main(batches, steps: int = 1000) -> None:
    params = init_params(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    for step in range(steps):
        images, labels = next(batches)
        params, opt_state, loss = train_step(params, opt_state, jnp.asarray(images), jnp.asarray(labels))
        if step % 100 == 0:
            print(step, float(loss))
