"""Masked-LM pretraining in TensorFlow from TFRecords that were tokenized and padded to max_seq_length when they
were written: tf.data parses fixed-length features, so the collator only masks tokens and pads nothing."""
import argparse

import tensorflow as tf
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, TFAutoModelForMaskedLM


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_files", required=True)
    parser.add_argument("--max_seq_length", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=64)
    return parser.parse_args()


def decode_fn(example, max_seq_length):
    features = {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "attention_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
    }
    return tf.io.parse_single_example(example, features)


def main():
    args = parse_args()
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="tf")

    def mask_with_collator(batch):
        special = tf.cast(batch["input_ids"] == tokenizer.pad_token_id, tf.bool)
        batch["input_ids"], batch["labels"] = collator.tf_mask_tokens(
            batch["input_ids"], vocab_size=len(tokenizer), mask_token_id=tokenizer.mask_token_id,
            special_tokens_mask=special)
        return batch

    dataset = tf.data.TFRecordDataset(tf.io.gfile.glob(args.train_files))
    dataset = dataset.map(lambda x: decode_fn(x, args.max_seq_length))
    dataset = dataset.batch(args.batch_size, drop_remainder=True).map(mask_with_collator)
    model = TFAutoModelForMaskedLM.from_pretrained("bert-base-uncased")
    model.compile(optimizer="adam", jit_compile=True)
    model.fit(dataset, epochs=1)


if __name__ == "__main__":
    main()
