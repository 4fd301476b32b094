from datasets import load_dataset
from transformers import AutoTokenizer


def glue_splits(task):
    tokenizer = AutoTokenizer.from_pretrained("distilbert-base-uncased")
    raw = load_dataset("glue", task)
    encoded = raw.map(lambda rows: tokenizer(rows["sentence"], padding="max_length", truncation=True, max_length=128),
                      batched=True)
    return encoded["train"], encoded["validation"]
