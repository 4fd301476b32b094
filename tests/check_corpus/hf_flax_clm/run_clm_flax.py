"""Causal LM fine-tuning in the style of the Hugging Face Flax examples: group_texts, pmap, data-parallel."""
import math
from dataclasses import dataclass, field
from itertools import chain
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from datasets import load_dataset
from flax import jax_utils
from flax.training import train_state
from flax.training.common_utils import onehot, shard, shard_prng_key
from transformers import AutoTokenizer, FlaxAutoModelForCausalLM, HfArgumentParser


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")
    dtype: Optional[str] = field(
        default="float32",
        metadata={"help": "Floating-point format in which the model weights should be initialized and trained. "
                          "Choose one of `[float32, float16, bfloat16]`."},
    )


@dataclass
class DataTrainingArguments:
    dataset_name: str = field(default="wikitext")
    block_size: Optional[int] = field(default=512)
    per_device_batch_size: int = field(default=8)
    num_train_epochs: int = field(default=3)
    logging_steps: int = field(default=100)


class TrainState(train_state.TrainState):
    dropout_rng: jnp.ndarray


def data_loader(rng, dataset, batch_size, shuffle=False):
    steps_per_epoch = len(dataset) // batch_size
    batch_idx = jax.random.permutation(rng, len(dataset)) if shuffle else np.arange(len(dataset))
    batch_idx = batch_idx[: steps_per_epoch * batch_size].reshape((steps_per_epoch, batch_size))
    for idx in batch_idx:
        batch = dataset[idx]
        yield shard({k: np.array(v) for k, v in batch.items()})


def main():
    model_args, data_args = HfArgumentParser((ModelArguments, DataTrainingArguments)).parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = FlaxAutoModelForCausalLM.from_pretrained(model_args.model_name_or_path,
                                                     dtype=getattr(jnp, model_args.dtype))
    raw = load_dataset(data_args.dataset_name, "wikitext-2-raw-v1")
    tokenized = raw.map(lambda examples: tokenizer(examples["text"]), batched=True, remove_columns=["text"])
    block_size = min(data_args.block_size, tokenizer.model_max_length)

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = len(concatenated[list(examples.keys())[0]])
        total_length = (total_length // block_size) * block_size
        result = {k: [t[i: i + block_size] for i in range(0, total_length, block_size)]
                  for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    lm_datasets = tokenized.map(group_texts, batched=True)
    train_dataset = lm_datasets["train"]
    batch_size = data_args.per_device_batch_size * jax.device_count()
    steps_per_epoch = len(train_dataset) // batch_size
    schedule = optax.linear_schedule(5e-5, 0.0, steps_per_epoch * data_args.num_train_epochs)
    state = TrainState.create(apply_fn=model.__call__, params=model.params, tx=optax.adamw(schedule),
                              dropout_rng=jax.random.PRNGKey(0))

    def loss_fn(logits, labels):
        shift_logits = logits[..., :-1, :]
        shift_labels = labels[..., 1:]
        return optax.softmax_cross_entropy(shift_logits, onehot(shift_labels, shift_logits.shape[-1])).mean()

    def train_step(state, batch):
        dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

        def compute_loss(params):
            labels = batch.pop("labels")
            logits = state.apply_fn(**batch, params=params, dropout_rng=dropout_rng, train=True)[0]
            return loss_fn(logits, labels)

        loss, grad = jax.value_and_grad(compute_loss)(state.params)
        grad = jax.lax.pmean(grad, "batch")
        new_state = state.apply_gradients(grads=grad, dropout_rng=new_dropout_rng)
        metrics = jax.lax.pmean({"loss": loss, "learning_rate": schedule(state.step)}, axis_name="batch")
        return new_state, metrics

    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    state = jax_utils.replicate(state)
    rng = jax.random.PRNGKey(42)
    cur_step = 0
    for epoch in range(data_args.num_train_epochs):
        rng, input_rng = jax.random.split(rng)
        for batch in data_loader(input_rng, train_dataset, batch_size, shuffle=True):
            state, train_metric = p_train_step(state, batch)
            cur_step += 1
            if cur_step % data_args.logging_steps == 0 and cur_step > 0:
                train_metric = jax_utils.unreplicate(train_metric)
                print(f"Step {cur_step} loss {train_metric['loss']:.4f} ppl {math.exp(train_metric['loss']):.2f}")


if __name__ == "__main__":
    main()
