"""GLUE fine-tuning with Accelerate, in the style of the no_trainer examples."""
import argparse

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, default_data_collator


def main(raw_datasets):
    parser = argparse.ArgumentParser()
    parser.add_argument("--pad_to_max_length", action="store_true")
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--mixed_precision", default="no", choices=["no", "fp16", "bf16"])
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    tokenizer = AutoTokenizer.from_pretrained("bert-base-cased")
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-cased")
    padding = "max_length" if args.pad_to_max_length else False

    def preprocess_function(examples):
        return tokenizer(examples["sentence1"], examples["sentence2"], padding=padding, max_length=args.max_length,
                         truncation=True)

    processed = raw_datasets.map(preprocess_function, batched=True)
    if args.pad_to_max_length:
        data_collator = default_data_collator
    else:
        data_collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=(8 if accelerator.mixed_precision == "fp16" else None))
    train_dataloader = DataLoader(processed["train"], shuffle=True, collate_fn=data_collator, batch_size=32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    model.train()
    for step, batch in enumerate(train_dataloader):
        outputs = model(**batch)
        loss = outputs.loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        predictions = outputs.logits.argmax(dim=-1)
        predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        correct = (predictions == references).sum().item()
        if step % 100 == 0:
            accelerator.print(f"step {step}: correct {correct}")
