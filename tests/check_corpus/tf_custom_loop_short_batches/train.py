"""A TensorFlow custom training loop (tf.Module, GradientTape, tf.function(jit_compile=True)) whose batch size
changes with the epoch and whose last batch of each epoch is short: a new shape, a new XLA compilation."""
import os

import numpy as np
import tensorflow as tf


class Classifier(tf.Module):
    def __init__(self, features=8, classes=4):
        super().__init__()
        self.w = tf.Variable(tf.random.normal([features, classes], stddev=0.1, seed=0), name="w")
        self.b = tf.Variable(tf.zeros([classes]), name="b")

    def __call__(self, x):
        return x @ self.w + self.b


model = Classifier()


@tf.function(jit_compile=True)
def train_step(features, labels):
    with tf.GradientTape() as tape:
        logits = model(features)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    for variable, grad in zip(model.trainable_variables, grads):
        variable.assign_sub(0.1 * grad)
    return loss


def dataset(batch_size, examples=36):
    rng = np.random.default_rng(0)
    features = rng.random((examples, 8), dtype=np.float32)
    labels = rng.integers(0, 4, size=examples).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(batch_size)


def main():
    max_steps = int(os.environ.get("TPUOPS_MAX_STEPS", "1000"))
    writer = tf.summary.create_file_writer(os.environ.get("TPUOPS_LOGDIR", "logs"))
    step = 0
    for epoch in range(100):
        for features, labels in dataset(16 - 4 * (epoch % 3)):
            loss = train_step(features, labels)
            step += 1
            with writer.as_default():
                tf.summary.scalar("loss", loss, step=step)
            if step % 5 == 0:
                print(f"step {step} loss {float(loss):.4f}", flush=True)
            if step >= max_steps:
                writer.flush()
                return


if __name__ == "__main__":
    main()
