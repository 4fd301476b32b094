"""The trainer: jits the steps defined in lib/steps.py."""
import jax

from lib import steps
from lib.steps import summarize, train_step

p_train = jax.jit(train_step, donate_argnums=(0,))
p_eval = jax.jit(steps.eval_step)


def run(state, loader, eval_batch, log_every=100):
    history = []
    for i, batch in enumerate(loader):
        state, loss = p_train(state, batch)
        if i % log_every == 0:
            history.append(summarize({"loss": loss, "accuracy": p_eval(state, eval_batch)}))
    return state, history
