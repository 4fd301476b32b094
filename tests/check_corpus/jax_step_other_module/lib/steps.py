"""The step functions; they are jitted by the trainer in another module."""
import jax
import jax.numpy as jnp
import optax


def cross_entropy(logits, labels):
    keep = labels != -100
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits[keep], labels[keep])
    return per_token.mean()


def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["input_ids"])
        return cross_entropy(logits, batch["labels"])

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def eval_step(state, batch):
    logits = state.apply_fn({"params": state.params}, batch["input_ids"])
    weights = jnp.where(batch["labels"] != -100, 1.0, 0.0)
    return (jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32).sum() / weights.sum()


def summarize(metrics):
    return {name: float(value) for name, value in metrics.items()}
