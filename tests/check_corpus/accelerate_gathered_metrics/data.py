from datasets import load_dataset
from transformers import AutoTokenizer


def load_splits(max_length: int):
    tokenizer = AutoTokenizer.from_pretrained("bert-base-cased")
    raw = load_dataset("glue", "mrpc")

    def encode(rows):
        return tokenizer(rows["sentence1"], rows["sentence2"], truncation=True, padding="max_length",
                         max_length=max_length)

    encoded = raw.map(encode, batched=True, remove_columns=["sentence1", "sentence2", "idx"])
    encoded = encoded.rename_column("label", "labels")
    return encoded["train"], encoded["validation"]
