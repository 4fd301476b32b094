"""Masked LM on TensorFlow in the style of the Hugging Face TF examples: prepare_tf_dataset, compile, fit."""
from dataclasses import dataclass, field
from itertools import chain

import tensorflow as tf
from transformers import (AutoTokenizer, DataCollatorForLanguageModeling, HfArgumentParser, TFAutoModelForMaskedLM,
                          TFTrainingArguments, create_optimizer)


@dataclass
class DataTrainingArguments:
    max_seq_length: int = field(default=128)
    mlm_probability: float = field(default=0.15)
    line_by_line: bool = field(default=False)


def main():
    data_args, training_args = HfArgumentParser((DataTrainingArguments, TFTrainingArguments)).parse_args_into_dataclasses()
    if training_args.fp16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    tokenizer = AutoTokenizer.from_pretrained("distilroberta-base")
    raw = load_raw()
    max_seq_length = data_args.max_seq_length

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = (len(concatenated[list(examples.keys())[0]]) // max_seq_length) * max_seq_length
        return {k: [t[i: i + max_seq_length] for i in range(0, total_length, max_seq_length)]
                for k, t in concatenated.items()}

    tokenized = raw.map(tokenize_function, batched=True, remove_columns=["text"]).map(group_texts, batched=True)
    data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=data_args.mlm_probability,
                                                    return_tensors="np")
    with training_args.strategy.scope():
        model = TFAutoModelForMaskedLM.from_pretrained("distilroberta-base")
        tf_train = model.prepare_tf_dataset(tokenized["train"], shuffle=True,
                                            batch_size=training_args.per_device_train_batch_size,
                                            collate_fn=data_collator, drop_remainder=True)
        optimizer, lr_schedule = create_optimizer(init_lr=training_args.learning_rate, num_train_steps=1000,
                                                  num_warmup_steps=100)
        model.compile(optimizer=optimizer, jit_compile=training_args.xla)
        history = model.fit(tf_train, epochs=int(training_args.num_train_epochs))
    print(f"train loss {history.history['loss'][-1]:.3f}")


def load_raw():
    from datasets import load_dataset
    return load_dataset("wikitext", "wikitext-2-raw-v1")


if __name__ == "__main__":
    main()
