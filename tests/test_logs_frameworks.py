"""Event files written by the frameworks' own writers: PyTorch's SummaryWriter (simple_value) and
TensorFlow 2's tf.summary.scalar (tensor scalars). Heavy: CI installs torch (CPU) / tensorflow-cpu for them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import tests.logs_writers  # noqa: F401  TensorBoard's stub file API for torch's writer (no TensorFlow import)
from tests.logs_writers import f32
from tpuops.cloud.blobs import DirBlobStore
from tpuops.logs.tail import Tail

pytestmark = pytest.mark.heavy


def test_pytorch_summary_writer_scalars_and_appends(tmp_path: Path) -> None:
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    writer = tensorboard.SummaryWriter(log_dir=str(tmp_path / "gpt2"))
    for step in range(50):
        writer.add_scalar("train/loss", 10.0 / (step + 1), step)
        writer.add_scalars("lr", {"group0": 0.001 * step}, step)  # a run per key: gpt2/lr_group0
    writer.flush()
    tail = Tail(DirBlobStore(tmp_path))
    points = tail.poll()
    losses = [(p.step, p.value) for p in points if p.tag == "train/loss"]
    assert losses == [(step, f32(10.0 / (step + 1))) for step in range(50)]
    lrs = [(p.run, p.step, p.value) for p in points if p.tag == "lr"]
    assert lrs == [("gpt2/lr_group0", step, f32(0.001 * step)) for step in range(50)]
    writer.add_scalar("train/loss", 0.5, 50)
    writer.flush()
    assert [(p.tag, p.step, p.value) for p in tail.poll()] == [("train/loss", 50, 0.5)]
    writer.close()


TF2_WRITER = """
import sys
import tensorflow as tf
writer = tf.summary.create_file_writer(sys.argv[1])
with writer.as_default():
    for step in range(20):
        tf.summary.scalar("epoch_loss", 1.0 / (step + 1), step=step)
        tf.summary.histogram("weights", [1.0, 2.0, 3.0], step=step)  # a tensor that is not a scalar
writer.close()
"""


def test_tensorflow2_summary_scalar(tmp_path: Path) -> None:
    # In its own process: this one has TensorBoard's no-TensorFlow stub loaded (see logs_writers).
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    subprocess.run([sys.executable, "-c", TF2_WRITER, str(tmp_path / "train")], check=True, timeout=300,
                   capture_output=True)
    points = Tail(DirBlobStore(tmp_path)).poll()
    assert [(p.run, p.tag, p.step, p.value) for p in points] == [
        ("train", "epoch_loss", step, f32(1.0 / (step + 1))) for step in range(20)
    ]
