"""Event files for the logs tests, written by real writers: TensorBoard's own EventFileWriter, and TF2-style
tensor scalars built with TensorBoard's protos (what `tf.summary.scalar` writes, without TensorFlow)."""

from __future__ import annotations

import struct
import sys
import types
from pathlib import Path


def _use_tensorboards_stub_file_api() -> None:
    """TensorBoard's writer reaches files through `tensorboard.compat.tf`, which imports TensorFlow when it is
    installed (seconds). The `notf` marker module (TensorBoard's no-TF build switch) makes that lazy module
    resolve to TensorBoard's stub; the marker is removed right after, so that `tf.summary` (which checks it
    again through `tensorboard.compat.tf2`) keeps working for any later test in the session."""
    marker = "tensorboard.compat.notf"
    added = marker not in sys.modules
    sys.modules.setdefault(marker, types.ModuleType(marker))
    try:
        from tensorboard.compat import tf

        tf.io  # noqa: B018  resolves the lazy module now (to the stub, unless TensorFlow was loaded first)
    finally:
        if added:
            del sys.modules[marker]


_use_tensorboards_stub_file_api()

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

from tpuops.logs.tfrecord import frame_record  # noqa: E402

WALL = 1_700_000_000.0


def simple_event(step: int, values: dict[str, float], wall_time: float | None = None) -> event_pb2.Event:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values.items()])
    return event_pb2.Event(wall_time=WALL + step if wall_time is None else wall_time, step=step, summary=summary)


def tf2_scalar_event(step: int, tag: str, value: float, with_metadata: bool) -> event_pb2.Event:
    """As TF2's summary writer does: a float32 scalar tensor in tensor_content; the scalars plugin named in
    the metadata only with the tag's first value."""
    tensor = tensor_pb2.TensorProto(dtype=1, tensor_content=struct.pack("<f", value))
    tensor.tensor_shape.SetInParent()  # shape [] : a scalar
    summary_value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if with_metadata:
        summary_value.metadata.plugin_data.plugin_name = "scalars"
        summary_value.metadata.plugin_data.content = b""
    return event_pb2.Event(wall_time=WALL + step, step=step, summary=summary_pb2.Summary(value=[summary_value]))


def f32(value: float) -> float:
    """What a float32 field gives back for `value`."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


class TbWriter:
    """TensorBoard's own EventFileWriter on a directory, flushed on demand."""

    def __init__(self, logdir: Path, suffix: str = "") -> None:
        self.writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=3600, filename_suffix=suffix)

    @property
    def path(self) -> Path:
        return Path(self.writer._file_name)  # the writer names its file itself (time, host, pid, uid)

    def scalars(self, steps: range, tag: str = "loss", value=lambda step: 1.0 / (step + 1)) -> None:
        for step in steps:
            self.writer.add_event(simple_event(step, {tag: value(step)}))
        self.writer.flush()

    def event(self, event: event_pb2.Event) -> None:
        self.writer.add_event(event)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def event_file_name(index: int = 0) -> str:
    return f"events.out.tfevents.{1_700_000_000 + index}.testhost.1.0"


def framed(*events: event_pb2.Event) -> bytes:
    return b"".join(frame_record(event.SerializeToString()) for event in events)
