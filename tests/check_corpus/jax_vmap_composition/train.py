"""Per-example gradients: jax.jit over jax.vmap over jax.grad, and a jitted value_and_grad."""
import jax
import jax.numpy as jnp


def predict(w, x):
    return jnp.dot(x, w)


def per_example_loss(w, x, y):
    err = predict(w, x) - y
    if err.sum() > 0:
        err = -err
    return jnp.square(err)


def clipped(w, x, y, clip):
    g = jax.grad(per_example_loss)(w, x, y)
    norm = jnp.linalg.norm(g)
    return g * jnp.minimum(1.0, clip / norm)


per_example_grads = jax.jit(jax.vmap(clipped, in_axes=(None, 0, 0, None)))


def mean_loss(w, xs, ys):
    return jnp.mean(jax.vmap(per_example_loss, in_axes=(None, 0, 0))(w, xs, ys))


value_and_grad_step = jax.jit(jax.value_and_grad(mean_loss))


def train(xs, ys, steps=100, clip=1.0):
    w = jnp.zeros(xs.shape[1])
    for step in range(steps):
        grads = per_example_grads(w, xs, ys, clip).mean(0)
        w = w - 0.1 * grads
        loss, _ = value_and_grad_step(w, xs, ys)
        if step % 10 == 0:
            print(step, loss)
    return w
