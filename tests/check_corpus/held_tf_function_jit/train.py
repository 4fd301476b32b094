"""TensorFlow with an XLA-compiled step: tf.function(jit_compile=True)."""
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
optimizer = tf.keras.optimizers.SGD(0.01)
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function(jit_compile=True)
def train_step(images, labels):
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = loss_object(labels, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    wrong = tf.where(tf.argmax(logits, -1) != labels)
    print("traced with", loss.numpy())
    return loss, tf.shape(wrong)[0]


def train(dataset, epochs):
    for epoch in range(epochs):
        for images, labels in dataset:
            loss, errors = train_step(images, labels)
        print(f"epoch {epoch} loss {loss.numpy():.3f} errors {int(errors)}")
