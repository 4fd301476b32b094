"""Masked LM in the style of the Hugging Face Flax examples: a numpy collator fed fixed blocks."""
from dataclasses import dataclass
from itertools import chain

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.common_utils import onehot, shard
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, FlaxAutoModelForMaskedLM


@dataclass
class FlaxDataCollatorForLanguageModeling:
    tokenizer: object
    mlm_probability: float = 0.15

    def __call__(self, examples, pad_to_multiple_of=16):
        batch = self.tokenizer.pad(examples, pad_to_multiple_of=pad_to_multiple_of, return_tensors="np")
        special = batch.pop("special_tokens_mask", None)
        batch["input_ids"], batch["labels"] = self.mask_tokens(batch["input_ids"], special)
        return batch

    def mask_tokens(self, inputs, special_tokens_mask):
        labels = inputs.copy()
        probability_matrix = np.full(labels.shape, self.mlm_probability)
        special_tokens_mask = special_tokens_mask.astype("bool")
        probability_matrix[special_tokens_mask] = 0.0
        masked_indices = np.random.binomial(1, probability_matrix).astype("bool")
        labels[~masked_indices] = -100
        inputs[masked_indices] = self.tokenizer.mask_token_id
        return inputs, labels


def train(args, datasets):
    tokenizer = AutoTokenizer.from_pretrained(args.model_name)
    model = FlaxAutoModelForMaskedLM.from_pretrained(args.model_name, dtype=jnp.bfloat16)
    max_seq_length = args.max_seq_length

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = (len(concatenated["input_ids"]) // max_seq_length) * max_seq_length
        return {k: [t[i: i + max_seq_length] for i in range(0, total_length, max_seq_length)]
                for k, t in concatenated.items()}

    tokenized = datasets.map(tokenize_function, batched=True, remove_columns=["text"])
    tokenized = tokenized.map(group_texts, batched=True)
    data_collator = FlaxDataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15)
    torch_collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)

    def train_step(state, batch, dropout_rng):
        dropout_rng, new_dropout_rng = jax.random.split(dropout_rng)

        def loss_fn(params):
            labels = batch.pop("labels")
            logits = state.apply_fn(**batch, params=params, dropout_rng=dropout_rng, train=True)[0]
            label_mask = jnp.where(labels > 0, 1.0, 0.0)
            loss = optax.softmax_cross_entropy(logits, onehot(labels, logits.shape[-1])) * label_mask
            return loss.sum() / label_mask.sum()

        loss, grad = jax.value_and_grad(loss_fn)(state.params)
        grad = jax.lax.pmean(grad, "batch")
        return state.apply_gradients(grads=grad), jax.lax.pmean({"loss": loss}, axis_name="batch"), new_dropout_rng

    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    train_samples = tokenized["train"]
    batch_size = args.batch_size * jax.local_device_count()
    num_batches = len(train_samples) // batch_size
    for step in range(num_batches):
        samples = [train_samples[int(i)] for i in range(step * batch_size, (step + 1) * batch_size)]
        batch = shard(data_collator(samples))
        state, metrics, args.rng = p_train_step(args.state, batch, args.rng)
    return torch_collator
