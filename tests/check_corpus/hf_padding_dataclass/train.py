"""Text classification whose padding choice travels through a dataclass, a default argument and a config."""
from dataclasses import dataclass, field

import torch
import torch_xla.core.xla_model as xm
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

CONFIG = {"padding": "longest", "max_length": 256}


@dataclass
class DataArguments:
    max_length: int = 128
    padding: str = field(default="longest", metadata={"help": "longest, max_length or do_not_pad"})


@dataclass
class FixedEncoder:
    tokenizer: object
    padding: str = "max_length"
    max_length: int = 128

    def __call__(self, texts):
        return self.tokenizer(texts, padding=self.padding, max_length=self.max_length, truncation=True)


def encode(tokenizer, texts, padding="longest"):
    return tokenizer(texts, padding=padding, truncation=True, return_tensors="pt")


def encode_config(tokenizer, texts):
    return tokenizer(texts, padding=CONFIG["padding"], truncation=True)


def main(texts, labels, data_args: DataArguments):
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    features = tokenizer(texts, padding=data_args.padding, max_length=data_args.max_length, truncation=True)
    fixed = FixedEncoder(tokenizer)(texts)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=64)
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased").to(xm.xla_device())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    for start in range(0, len(texts), 16):
        batch = collator([{**{k: v[i] for k, v in features.items()}, "labels": labels[i]}
                          for i in range(start, min(start + 16, len(texts)))])
        batch = {k: v.to(xm.xla_device()) for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
    return fixed
