"""Losses that drop the padded positions with tf.boolean_mask: the result's length depends on how many tokens
are real, a shape XLA cannot know when it compiles the TPU step."""
import tensorflow as tf

PAD_ID = 0


def masked_loss(y_true, y_pred):
    keep = tf.not_equal(y_true, PAD_ID)
    per_token = tf.keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
    return tf.reduce_mean(tf.boolean_mask(per_token, keep))
