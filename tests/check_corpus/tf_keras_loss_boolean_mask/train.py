"""A TensorFlow 2 tagger trained on a TPU two ways: Keras compile/fit with the masked loss of losses.py, and a
custom loop whose step drops padding with tf.boolean_mask. A keras.Model subclass with a train_step that takes a
plain Python int (which part of the model to update) sits next to them."""
import tensorflow as tf
from tensorflow import keras

from losses import masked_loss

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)


def build_tagger(vocab: int = 30000, tags: int = 17) -> keras.Model:
    return keras.Sequential([keras.layers.Embedding(vocab, 128), keras.layers.Dense(tags)])


class TwoPartTagger(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = keras.layers.Embedding(30000, 128)
        self.classifier = keras.layers.Dense(17)

    def call(self, inputs):
        return self.classifier(self.encoder(inputs))

    def train_step(self, data, part: int = 0):
        tokens, tags = data
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(tags, self(tokens, training=True))
        if part == 0:
            variables = self.encoder.trainable_variables
        else:
            variables = self.classifier.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"loss": loss}


with strategy.scope():
    tagger = build_tagger()
    tagger.compile(optimizer="adam", loss=masked_loss)
    optimizer = keras.optimizers.Adam()


def fit(dataset: tf.data.Dataset) -> None:
    tagger.fit(dataset, epochs=2)


@tf.function
def distributed_step(iterator):
    def step_fn(tokens, tags):
        with tf.GradientTape() as tape:
            logits = tagger(tokens, training=True)
            real = tf.not_equal(tags, 0)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                tf.boolean_mask(tags, real), tf.boolean_mask(logits, real), from_logits=True))
        grads = tape.gradient(loss, tagger.trainable_variables)
        optimizer.apply_gradients(zip(grads, tagger.trainable_variables))
        return loss

    tokens, tags = next(iterator)
    return strategy.experimental_run_v2(step_fn, args=(tokens, tags))


def custom_loop(dataset: tf.data.Dataset, steps: int) -> None:
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    for _ in range(steps):
        distributed_step(iterator)
