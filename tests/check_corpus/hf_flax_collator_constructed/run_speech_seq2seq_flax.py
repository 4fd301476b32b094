"""A Flax speech-to-text fine-tuning script in the Hugging Face style: the collator's fields default to fixed
lengths, but the script builds it with target_padding="longest", so every batch of labels has the length of its
longest transcript (a new shape, so a new compilation of the pmapped step, for most batches). The input features
are padded to a multiple taken from the data arguments."""
from dataclasses import dataclass, field
from typing import Optional

import jax
import numpy as np
from transformers import AutoFeatureExtractor, AutoTokenizer, FlaxAutoModelForSpeechSeq2Seq, HfArgumentParser


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="openai/whisper-tiny")


@dataclass
class DataTrainingArguments:
    max_target_length: int = field(default=128)
    pad_input_to_multiple_of: Optional[int] = field(default=128)


@dataclass
class SpeechCollatorWithPadding:
    feature_extractor: AutoFeatureExtractor
    tokenizer: AutoTokenizer
    input_padding: str = "max_length"
    target_padding: str = "max_length"
    max_target_length: Optional[int] = None
    pad_to_multiple_of: Optional[int] = None

    def __call__(self, features: list[dict]) -> dict:
        inputs = [{"input_features": f["input_features"]} for f in features]
        targets = [{"input_ids": f["labels"]} for f in features]
        batch = self.feature_extractor.pad(inputs, padding=self.input_padding,
                                           pad_to_multiple_of=self.pad_to_multiple_of, return_tensors="np")
        labels = self.tokenizer.pad(targets, padding=self.target_padding, max_length=self.max_target_length,
                                    return_tensors="np")
        batch["labels"] = np.where(labels["attention_mask"] == 1, labels["input_ids"], -100)
        return dict(batch)


def main():
    model_args, data_args = HfArgumentParser((ModelArguments, DataTrainingArguments)).parse_args_into_dataclasses()
    model = FlaxAutoModelForSpeechSeq2Seq.from_pretrained(model_args.model_name_or_path)
    collator = SpeechCollatorWithPadding(
        feature_extractor=AutoFeatureExtractor.from_pretrained(model_args.model_name_or_path),
        tokenizer=AutoTokenizer.from_pretrained(model_args.model_name_or_path),
        input_padding="longest",
        target_padding="longest",
        max_target_length=data_args.max_target_length,
        pad_to_multiple_of=data_args.pad_input_to_multiple_of,
    )

    def train_step(params, batch):
        def loss_fn(p):
            logits = model(**batch, params=p).logits
            return -jax.nn.log_softmax(logits).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        grads = jax.lax.pmean(grads, "batch")
        return jax.tree_util.tree_map(lambda w, g: w - 1e-5 * g, params, grads), jax.lax.pmean(loss, "batch")

    p_train_step = jax.pmap(train_step, axis_name="batch")
    return collator, p_train_step


if __name__ == "__main__":
    main()
