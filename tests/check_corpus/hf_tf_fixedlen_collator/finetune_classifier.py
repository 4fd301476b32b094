"""Fine-tuning on raw text in the same project: here the tokenizer pads each batch to its own longest example."""
import tensorflow as tf
from transformers import AutoTokenizer, TFAutoModelForSequenceClassification


def batches(texts, labels, batch_size=32):
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    for start in range(0, len(texts), batch_size):
        encoded = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, return_tensors="tf")
        yield dict(encoded), tf.constant(labels[start:start + batch_size])


def train(texts, labels):
    model = TFAutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)
    model.compile(optimizer="adam", jit_compile=True)
    for features, targets in batches(texts, labels):
        model.train_on_batch(features, targets)
