"""A TensorFlow image classifier that runs on a TPU or a GPU: float16 only behind a flag that is off by default,
and mixed_float16 only on the GPU side of the flag that picks the TPU (TPUs compute in bfloat16)."""
import tensorflow as tf
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_bool("tpu", True, "train on a Cloud TPU")
flags.DEFINE_bool("use_mixed_precision", False, "float16 compute with loss scaling (GPUs only)")


def set_precision() -> None:
    if FLAGS.tpu:
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    else:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")


def build_model() -> tf.keras.Model:
    dtype = tf.float16 if FLAGS.use_mixed_precision else tf.float32
    inputs = tf.keras.Input((224, 224, 3), dtype=dtype)
    x = tf.keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1000)(x))


def main(_) -> None:
    set_precision()
    if FLAGS.tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    else:
        strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(tf.data.Dataset.load("gs://example-bucket/imagenet-small"), epochs=1)


if __name__ == "__main__":
    app.run(main)
