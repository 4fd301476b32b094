"""TFRecord framing and scalar decoding: files from TensorBoard's own writer, TF2 tensor scalars, damage."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from tensorboard.compat.proto import summary_pb2, tensor_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_masked_crc

from tests.logs_writers import TbWriter, f32, framed, simple_event, tf2_scalar_event
from tpuops.logs.events import ScalarDecoder, tensor_scalar
from tpuops.logs.tfrecord import HEADER_SIZE, RecordReader, frame_record, masked_crc32c, read_records


def decode_all(records: list[bytes], run: str = ".") -> list[tuple[str, int, float]]:
    decoder = ScalarDecoder(run)
    return [(p.tag, p.step, p.value) for record in records for p in decoder.decode(record)]


def test_masked_crc_matches_tensorboards_own() -> None:
    for data in (b"", b"a", b"\x00" * 8, bytes(range(256)) * 3):
        assert masked_crc32c(data) == tensorboard_masked_crc(data)


def test_reads_what_tensorboards_writer_wrote(tmp_path: Path) -> None:
    writer = TbWriter(tmp_path)
    writer.scalars(range(100), tag="loss", value=lambda s: s * 0.5)
    writer.close()
    records, reader = read_records(writer.path.read_bytes())
    assert decode_all(records) == [("loss", s, s * 0.5) for s in range(100)]
    assert reader.corruptions == [] and reader.pending_bytes == 0


def test_truncated_last_record_waits_for_the_rest_at_every_cut() -> None:
    data = framed(*(simple_event(s, {"loss": s}) for s in range(3)))
    for cut in range(len(data) + 1):
        reader = RecordReader()
        first = reader.feed(data[:cut])
        rest = reader.feed(data[cut:])
        assert decode_all(first + rest) == [("loss", s, float(s)) for s in range(3)], cut
        assert reader.corruptions == [] and reader.pending_bytes == 0
        assert reader.offset == len(data)


def test_bad_data_crc_skips_only_that_record_and_names_its_offset() -> None:
    records = [frame_record(simple_event(s, {"loss": s}).SerializeToString()) for s in range(3)]
    damaged = bytearray(records[1])
    damaged[HEADER_SIZE + 2] ^= 0xFF  # a bit of the data, not the framing
    reader = RecordReader()
    out = reader.feed(records[0] + bytes(damaged) + records[2])
    assert decode_all(out) == [("loss", 0, 0.0), ("loss", 2, 2.0)]
    assert [(c.offset, c.reason) for c in reader.corruptions] == [(len(records[0]), "bad data CRC")]


def test_bad_length_crc_resyncs_on_the_next_valid_record_reporting_once() -> None:
    records = [frame_record(simple_event(s, {"loss": s}).SerializeToString()) for s in range(4)]
    damaged = bytearray(records[1])
    damaged[0] ^= 0x01  # the length field: nothing after it can be trusted until a valid header
    reader = RecordReader()
    stream = records[0] + bytes(damaged) + records[2] + records[3]
    out = []
    for start in range(0, len(stream), 7):  # fed in small pieces, as a slow writer would
        out += reader.feed(stream[start:start + 7])
    assert decode_all(out) == [("loss", 0, 0.0), ("loss", 2, 2.0), ("loss", 3, 3.0)]
    assert [(c.offset, c.reason) for c in reader.corruptions] == [(len(records[0]), "bad length CRC")]


def test_tf2_tensor_scalars_with_metadata_on_first_value_only() -> None:
    events = [tf2_scalar_event(s, "epoch_loss", 0.25 * s, with_metadata=(s == 0)) for s in range(5)]
    records, _ = read_records(framed(*events))
    assert decode_all(records) == [("epoch_loss", s, 0.25 * s) for s in range(5)]


def test_tensors_of_other_plugins_are_not_scalars() -> None:
    histogram = summary_pb2.Summary.Value(tag="weights", tensor=tensor_pb2.TensorProto(dtype=1, float_val=[1.0]))
    histogram.metadata.plugin_data.plugin_name = "histograms"
    no_metadata = summary_pb2.Summary.Value(tag="mystery", tensor=tensor_pb2.TensorProto(dtype=1, float_val=[2.0]))
    event = simple_event(1, {"loss": 0.5})
    event.summary.value.extend([histogram, no_metadata])
    records, _ = read_records(framed(event))
    assert decode_all(records) == [("loss", 1, 0.5)]


@pytest.mark.parametrize(
    ("tensor", "expected"),
    [
        (tensor_pb2.TensorProto(dtype=1, float_val=[1.5]), 1.5),
        (tensor_pb2.TensorProto(dtype=2, double_val=[0.1]), 0.1),
        (tensor_pb2.TensorProto(dtype=2, tensor_content=struct.pack("<d", 0.1)), 0.1),
        (tensor_pb2.TensorProto(dtype=9, int64_val=[7]), 7.0),
        (tensor_pb2.TensorProto(dtype=3, tensor_content=struct.pack("<i", -3)), -3.0),
        (tensor_pb2.TensorProto(dtype=19, half_val=[struct.unpack("<H", struct.pack("<e", 0.5))[0]]), 0.5),
        (tensor_pb2.TensorProto(dtype=14, half_val=[0x3FC0]), 1.5),  # bfloat16 bits
        (tensor_pb2.TensorProto(dtype=1, float_val=[1.0, 2.0]), None),  # not a scalar
        (tensor_pb2.TensorProto(dtype=7, string_val=[b"x"]), None),  # a string
    ],
)
def test_tensor_scalar_dtypes(tensor: tensor_pb2.TensorProto, expected: float | None) -> None:
    assert tensor_scalar(tensor) == expected


def test_simple_values_are_float32() -> None:
    records, _ = read_records(framed(simple_event(3, {"lr": 0.1})))
    assert decode_all(records) == [("lr", 3, f32(0.1))]
