"""Fine-tunes a small causal LM with Hugging Face's Trainer; `--tpu_num_cores 8` sends it to the TPU."""
import argparse

import torch
import torch.nn.functional as F
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments


class PromptCollator:
    """Prompt and answer token ids, padded per batch by hand."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows):
        ids = [torch.tensor(r["input_ids"]) for r in rows]
        labels = [torch.tensor(r["labels"]) for r in rows]
        ids = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=self.pad_id)
        labels = torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=-100)
        return {"input_ids": ids, "labels": labels, "attention_mask": (ids != self.pad_id).long()}


class FixedPromptCollator:
    """For evaluation: the prompts alone, padded to one length."""

    def __init__(self, pad_id: int, length: int):
        self.pad_id = pad_id
        self.length = length

    def __call__(self, rows):
        ids = [torch.tensor(r["input_ids"]) for r in rows]
        ids = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=self.pad_id)
        return {"input_ids": F.pad(ids, (0, self.length - ids.shape[1]), value=self.pad_id)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--tpu_num_cores", type=int, default=None)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).to(device)
    data = load_dataset("json", data_files="prompts.jsonl")["train"]
    training_args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, bf16=True)
    if args.tpu_num_cores:
        training_args.tpu_num_cores = args.tpu_num_cores
    trainer = Trainer(model=model, args=training_args, train_dataset=data,
                      data_collator=PromptCollator(tokenizer.eos_token_id))
    trainer.train()


if __name__ == "__main__":
    main()
