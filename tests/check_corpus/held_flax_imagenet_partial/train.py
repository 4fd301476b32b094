"""Flax ImageNet style: pmap over functools.partial(train_step, learning_rate_fn=...), a config object."""
import functools

import jax
import jax.numpy as jnp
import optax
from flax.training import common_utils


def cross_entropy_loss(logits, labels, num_classes):
    one_hot = common_utils.onehot(labels, num_classes=num_classes)
    return jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))


def train_step(state, batch, learning_rate_fn, config):
    def loss_fn(params):
        logits, new_model_state = state.apply_fn({"params": params, "batch_stats": state.batch_stats},
                                                 batch["image"], mutable=["batch_stats"])
        loss = cross_entropy_loss(logits, batch["label"], config.num_classes)
        if config.weight_decay > 0:
            loss = loss + config.weight_decay * 0.5 * sum(jnp.sum(p ** 2) for p in jax.tree_util.tree_leaves(params))
        return loss, (new_model_state, logits)

    step = state.step
    lr = learning_rate_fn(step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    aux, grads = grad_fn(state.params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    new_model_state, logits = aux[1]
    metrics = {"loss": aux[0], "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]), "learning_rate": lr}
    new_state = state.apply_gradients(grads=grads, batch_stats=new_model_state["batch_stats"])
    if config.half_precision:
        finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
        new_state = jax.tree_util.tree_map(functools.partial(jnp.where, finite), new_state, state)
    return new_state, metrics


def train_and_evaluate(config, state, train_iter, learning_rate_fn):
    p_train_step = jax.pmap(functools.partial(train_step, learning_rate_fn=learning_rate_fn, config=config),
                            axis_name="batch")
    train_metrics = []
    for step, batch in zip(range(config.num_train_steps), train_iter):
        state, metrics = p_train_step(state, batch)
        train_metrics.append(metrics)
        if (step + 1) % config.log_every_steps == 0:
            summary = {k: float(jnp.mean(v)) for k, v in common_utils.get_metrics(train_metrics).items()}
            print(step + 1, summary)
            train_metrics = []
    return state
