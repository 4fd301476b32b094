"""A Keras classifier on a TPU strategy with the metric above, and a PyTorch/XLA twin that keeps scores with a
library's host-copy helper (pytorch_toolbelt's `to_numpy`)."""

import tensorflow as tf
import torch
import torch_xla.core.xla_model as xm
from pytorch_toolbelt.utils import to_numpy

from metrics import SignalRate


def keras_fit(dataset, strategy) -> None:
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[SignalRate()])
    model.fit(dataset, epochs=2)


def torch_validate(model, loader) -> float:
    device = xm.xla_device()
    scores, labels, seen = [], [], []
    for images, targets in loader:
        images, targets = images.to(device), targets.to(device)
        logits = model(images)
        xm.mark_step()
        scores.extend(to_numpy(torch.sigmoid(logits)))
        labels.extend(to_numpy(targets))
        seen.append(to_numpy(list(range(len(seen)))))
    return float(sum(scores)) + float(len(labels))
