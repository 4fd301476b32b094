"""Keras 3 on TensorFlow: a model overriding train_step, compiled with jit_compile=True and fitted."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


class MaskedModel(keras.Model):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.embed = keras.layers.Embedding(vocab, dim)
        self.out = keras.layers.Dense(vocab)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, tokens):
        return self.out(self.embed(tokens))

    def train_step(self, data):
        tokens, labels = data
        with tf.GradientTape() as tape:
            logits = self(tokens, training=True)
            keep = tf.not_equal(labels, 0)
            picked = tf.boolean_mask(logits, keep)
            targets = tf.boolean_mask(labels, keep)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(targets, picked, from_logits=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        if loss > 100.0:
            tf.print("large loss", loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


def dataset(steps, batch=8, length=12):
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 32, size=(steps * batch, length))
    labels = np.where(rng.random(tokens.shape) < 0.3, 0, tokens)
    return tf.data.Dataset.from_tensor_slices((tokens, labels)).batch(batch, drop_remainder=True)


if __name__ == "__main__":
    steps = int(os.environ.get("TPUOPS_MAX_STEPS", "100"))
    model = MaskedModel()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
    history = model.fit(dataset(steps), epochs=1, verbose=2)
    print("final loss", history.history["loss"][-1])
