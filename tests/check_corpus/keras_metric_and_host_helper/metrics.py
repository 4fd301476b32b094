"""A Keras metric of our own: fit calls update_state and result inside its compiled train function, every batch."""

import numpy as np
import tensorflow as tf


class SignalRate(tf.keras.metrics.Metric):
    def __init__(self, threshold: float = 0.5, name: str = "signal_rate", **kwargs) -> None:
        super().__init__(name=name, **kwargs)
        self.threshold = threshold
        self.hits = self.add_weight(name="hits", initializer="zeros")
        self.seen = self.add_weight(name="seen", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = y_true.numpy()
        chosen = tf.cast(y_pred >= self.threshold, tf.float32)
        self.hits.assign_add(tf.reduce_sum(chosen * tf.cast(labels, tf.float32)))
        self.seen.assign_add(tf.cast(tf.size(y_true), tf.float32))

    def result(self):
        seen = float(self.seen.read_value())
        return self.hits / max(seen, 1.0)

    def reset_state(self):
        self.hits.assign(0.0)
        self.seen.assign(float(np.zeros(())))
