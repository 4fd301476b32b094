"""Keras `fit` (compile(jit_compile=True)) on variable-length token sequences batched with `padded_batch`: without
`padded_shapes` each batch is padded to its own longest sequence, so nearly every batch has a new shape and XLA
compiles the train function again. The evaluation set is padded to one fixed length (a near miss)."""
import os

import numpy as np
import tensorflow as tf

MAX_LEN = 48
VOCAB = 64


def sequences(count, seed):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        length = int(rng.integers(4, MAX_LEN))
        yield rng.integers(1, VOCAB, size=length).astype(np.int32), np.int32(length % 2)


def dataset(count, seed):
    signature = (tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32))
    return tf.data.Dataset.from_generator(lambda: sequences(count, seed), output_signature=signature)


def build_model():
    model = tf.keras.Sequential([
        tf.keras.layers.Embedding(VOCAB, 16),
        tf.keras.layers.GlobalAveragePooling1D(),
        tf.keras.layers.Dense(2),
    ])
    model.compile(optimizer="adam", jit_compile=True,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main():
    steps = int(os.environ.get("TPUOPS_MAX_STEPS", "200"))
    train = dataset(steps * 8, seed=0).padded_batch(8, drop_remainder=True)
    evaluation = dataset(32, seed=1).padded_batch(8, padded_shapes=([MAX_LEN], []), drop_remainder=True)
    model = build_model()
    model.fit(train.repeat(), steps_per_epoch=steps, epochs=1, verbose=2)
    print("eval loss", model.evaluate(evaluation, verbose=0))


if __name__ == "__main__":
    main()
