"""GLUE-style fine-tuning with Accelerate: the loss and the metric's inputs gathered across the cores."""

import evaluate
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, default_data_collator

from data import load_splits


def main() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    model = AutoModelForSequenceClassification.from_pretrained("bert-base-cased", num_labels=2)
    train_set, eval_set = load_splits(max_length=128)
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True, collate_fn=default_data_collator)
    eval_loader = DataLoader(eval_set, batch_size=64, collate_fn=default_data_collator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    metric = evaluate.load("glue", "mrpc")
    for epoch in range(3):
        model.train()
        seen = 0.0
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen += float(accelerator.reduce(loss.detach(), reduction="mean"))
        model.eval()
        losses = []
        for batch in eval_loader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            metric.add_batch(predictions=accelerator.gather(predictions), references=accelerator.gather(batch["labels"]))
            losses.append(accelerator.gather(outputs.loss.repeat(batch["labels"].shape[0])))
        eval_loss = torch.cat(losses).mean()
        accelerator.print(f"epoch {epoch}: eval loss {eval_loss.item():.4f}, {metric.compute()}, train {seen:.1f}")


if __name__ == "__main__":
    main()
