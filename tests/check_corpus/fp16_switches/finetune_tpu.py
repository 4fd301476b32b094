"""The fine-tuning script the TPU job runs (train_tf.py trains from scratch): it sets the mixed_float16 policy
unconditionally, so every layer computes in float16 on the TPU."""
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
tf.keras.mixed_precision.set_global_policy("mixed_float16")

with strategy.scope():
    base = tf.keras.applications.ResNet50(weights=None, classes=10)
    base.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
base.fit(tf.data.Dataset.load("gs://example-bucket/flowers"), epochs=3)
