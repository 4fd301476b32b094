"""A Flax NNX trainer: nnx.jit steps, an nnx.Optimizer and metrics."""
from functools import partial

import jax
import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        return self.linear2(self.dropout(nnx.gelu(self.linear1(x))))


def loss_fn(model, batch):
    logits = model(batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
    return loss, logits


@nnx.jit
def train_step(model, optimizer, metrics, batch):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    if jnp.isnan(loss):
        return
    metrics.update(loss=loss, logits=logits, labels=batch["y"])
    optimizer.update(model, grads)


@partial(nnx.jit, static_argnames="num_classes")
def eval_step(model, metrics, batch, num_classes=10):
    loss, logits = loss_fn(model, batch)
    if num_classes > 2:
        logits = logits[:, :num_classes]
    metrics.update(loss=loss, logits=logits, labels=batch["y"])


def train(train_ds, eval_ds, train_steps, eval_every=200):
    model = MLP(784, 256, 10, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    history = {"train_loss": [], "eval_loss": []}
    for step, batch in enumerate(train_ds.as_numpy_iterator()):
        train_step(model, optimizer, metrics, batch)
        if step > 0 and (step % eval_every == 0 or step == train_steps - 1):
            for metric, value in metrics.compute().items():
                history[f"train_{metric}"] = history.get(f"train_{metric}", []) + [float(value)]
            metrics.reset()
            for eval_batch in eval_ds.as_numpy_iterator():
                eval_step(model, metrics, eval_batch)
        if step >= train_steps:
            break
    return history
