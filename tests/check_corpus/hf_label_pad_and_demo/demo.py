"""Try the fine-tuned model on two sentences: one batch, tokenized once when the script starts, then a loop over
a file that tokenizes each line's batch on its own."""
import sys

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("t5-small")
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1])
examples = tokenizer(["translate English to German: Good morning.", "translate English to German: Thanks!"],
                     padding=True, return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**examples), skip_special_tokens=True))

with open(sys.argv[2]) as lines:
    for line in lines:
        batch = tokenizer(line.split("|"), padding=True, return_tensors="pt")
        with torch.no_grad():
            print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
