"""TensorFlow fine-tuning that tokenizes with padding=True and batches tensors of varying length."""
import tensorflow as tf
from transformers import AutoTokenizer, DataCollatorWithPadding, TFAutoModelForSequenceClassification


def encode_all(texts, labels):
    tokenizer = AutoTokenizer.from_pretrained("distilbert-base-uncased")
    encodings = tokenizer(texts, padding=True, truncation=True, return_tensors="tf")
    fixed = tokenizer(texts, padding="max_length", max_length=128, truncation=True)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=128, return_tensors="tf")
    return tf.data.Dataset.from_tensor_slices((dict(encodings), labels)), fixed, collator


def train(texts, labels):
    dataset, _, _ = encode_all(texts, labels)
    model = TFAutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased", num_labels=2)
    model.compile(optimizer=tf.keras.optimizers.Adam(3e-5), jit_compile=True)
    model.fit(dataset.shuffle(1000).batch(16), epochs=2)
