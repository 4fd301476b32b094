"""An Accelerate loop in the style of the no_trainer examples: prepare, backward, per-step progress."""
import argparse
import math

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                          get_scheduler)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert-base-cased")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--pad_to_max_length", action="store_true")
    return parser.parse_args()


def main(train_dataset):
    args = parse_args()
    accelerator = Accelerator(mixed_precision="fp16")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    padding = "max_length" if args.pad_to_max_length else False

    def preprocess(examples):
        return tokenizer(examples["sentence"], padding=padding, max_length=args.max_length, truncation=True)

    train_dataset = train_dataset.map(preprocess, batched=True)
    data_collator = DataCollatorWithPadding(tokenizer)
    train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=data_collator, batch_size=args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    steps = args.epochs * math.ceil(len(train_dataloader))
    lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=steps)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler)
    progress_bar = tqdm(range(steps), disable=not accelerator.is_local_main_process)
    completed_steps = 0
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            total_loss += loss.detach().float()
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            progress_bar.update(1)
            progress_bar.set_postfix(loss=loss.item())
            completed_steps += 1
            if completed_steps >= steps:
                break
        accelerator.print(f"epoch {epoch}: {total_loss.item() / len(train_dataloader):.4f}")
