"""An Equinox trainer: filter_jit / filter_value_and_grad, optax, an infinite loader."""
import equinox as eqx
import jax
import jax.numpy as jnp
import optax


class Net(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(64, 128, key=k1), jax.nn.relu, eqx.nn.Linear(128, 10, key=k2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def loss(model, x, y):
    pred_y = jax.vmap(model)(x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(pred_y), y[:, None], axis=1))


@eqx.filter_jit
def make_step(model, opt_state, optim, x, y):
    loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    model = eqx.apply_updates(model, updates)
    print("compiled with loss", loss_value.item())
    return model, opt_state, loss_value


@eqx.filter_jit
def accuracy(model, x, y):
    pred = jnp.argmax(jax.vmap(model)(x), axis=1)
    hits = jnp.nonzero(pred == y)[0]
    return hits.shape[0] / y.shape[0]


def infinite_loader(x, y, batch_size, key):
    size = x.shape[0]
    while True:
        key, sub = jax.random.split(key)
        perm = jax.random.permutation(sub, size)
        for start in range(0, size - batch_size + 1, batch_size):
            idx = perm[start: start + batch_size]
            yield x[idx], y[idx]


def train(x, y, steps=300, print_every=30):
    model = Net(jax.random.PRNGKey(0))
    optim = optax.adamw(3e-4)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))
    for step, (xb, yb) in zip(range(steps), infinite_loader(x, y, 64, jax.random.PRNGKey(1))):
        model, opt_state, train_loss = make_step(model, opt_state, optim, xb, yb)
        if (step % print_every) == 0 or (step == steps - 1):
            print(f"{step=}, train_loss={train_loss.item()}")
    return model
