"""A custom TPUStrategy loop: strategy.run inside a tf.function, distributed datasets."""
import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
tf.keras.mixed_precision.set_global_policy("mixed_float16")

BATCH = 128
SEQ = 64


def make_dataset(files):
    ds = tf.data.TFRecordDataset(files)
    ds = ds.map(lambda r: tf.io.parse_single_example(r, {"ids": tf.io.FixedLenFeature([SEQ], tf.int64)}))
    return ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Embedding(1000, 64), tf.keras.layers.Dense(1000)])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    train_loss = tf.keras.metrics.Mean("train_loss")


@tf.function
def train_multiple_steps(iterator, steps):
    def step_fn(inputs):
        ids = tf.cast(inputs["ids"], tf.int32)
        with tf.GradientTape() as tape:
            logits = model(ids[:, :-1], training=True)
            per_token = tf.keras.losses.sparse_categorical_crossentropy(ids[:, 1:], logits, from_logits=True)
            weights = tf.cast(ids[:, 1:] > 0, per_token.dtype)
            loss = tf.reduce_sum(per_token * weights) / tf.reduce_sum(weights)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_loss.update_state(loss)
        tf.print("loss", loss)

    for _ in tf.range(steps):
        strategy.run(step_fn, args=(next(iterator),))


def train(files, total_steps, steps_per_call=50):
    iterator = iter(strategy.experimental_distribute_dataset(make_dataset(files)))
    step = 0
    while step < total_steps:
        train_multiple_steps(iterator, tf.convert_to_tensor(steps_per_call))
        step += steps_per_call
        print(f"step {step} loss {train_loss.result().numpy():.4f}")
        train_loss.reset_state()
