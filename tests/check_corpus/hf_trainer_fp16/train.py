"""Fine-tuning with the Hugging Face Trainer: the step is inside the library."""
import argparse

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, default_data_collator

DTYPE_CHOICES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def main(train_dataset):
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--torch_dtype", default="bfloat16", choices=list(DTYPE_CHOICES))
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=DTYPE_CHOICES[args.torch_dtype])
    training_args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, fp16=args.fp16,
                                      bf16=not args.fp16, logging_steps=50)
    eval_args = TrainingArguments(output_dir="eval", per_device_eval_batch_size=8, fp16=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset,
                      data_collator=default_data_collator)
    trainer.train()
    return eval_args
