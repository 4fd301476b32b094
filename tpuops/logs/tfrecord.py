"""TFRecord framing, as TensorBoard event files use it, read incrementally.

Each record: uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes, `length` bytes of data,
uint32 masked CRC32C of the data. Both CRCs are checked with google-crc32c (C speed).

`RecordReader` is fed bytes as they are fetched and keeps what it cannot use yet, so a caller never needs
to fetch a byte twice:
- a record cut short at the end is being written: it is kept and completed by the next feed;
- a record whose data CRC is wrong is skipped (its length is trusted, its CRC was good) and reported;
- a header whose CRC is wrong gives no trustworthy length: the reader scans forward byte by byte for the
  next valid header, reporting the corruption once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c

HEADER_SIZE = 12  # length (8) + masked CRC of the length (4)
FOOTER_SIZE = 4  # masked CRC of the data
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_LENGTH_CRC_CACHE = 1 << 16
_LENGTH_CRCS: dict[int, int] = {}  # length -> masked CRC32C of its 8 little-endian bytes (pure function)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C (rotate right 15, add a constant): CRCs of CRCs stay distinguishable."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One record with its framing (for writers in tests and tools)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


@dataclass(frozen=True)
class Corruption:
    """Bytes that were skipped: where (offset in the file) and why."""

    offset: int
    reason: str


class RecordReader:
    """Splits a growing byte stream into records. Not thread-safe: one reader per file."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # file offset of the first byte of `_pending`
        self._pending = b""
        self._resyncing = False  # scanning for a valid header after a corrupt one
        self.corruptions: list[Corruption] = []  # appended as found; callers may read and clear

    @property
    def pending_bytes(self) -> int:
        """Bytes held back: the start of a record not yet complete."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[bytes]:
        """Add the next bytes of the file; return the complete, valid records they finish."""
        buf = self._pending + data if self._pending else data
        records: list[bytes] = []
        append = records.append
        crc = google_crc32c.value  # the hot loop: locals, and the CRC masking inlined (see masked_crc32c)
        unpack_header = _HEADER.unpack_from
        unpack_footer = _FOOTER.unpack_from
        pos = 0
        size = len(buf)
        length_crcs = _LENGTH_CRCS
        while size - pos >= HEADER_SIZE:
            length, length_crc = unpack_header(buf, pos)
            expected = length_crcs.get(length)
            if expected is None:  # event lengths repeat: the masked CRC of each length is computed once
                value = crc(buf[pos:pos + 8])
                expected = (((value >> 15) | (value << 17)) + _MASK_DELTA) & 0xFFFFFFFF
                if len(length_crcs) < _LENGTH_CRC_CACHE:
                    length_crcs[length] = expected
            if expected != length_crc:
                self._corrupt(pos, "bad length CRC")
                pos += 1  # no length to trust: look for the next valid header
                continue
            data_start = pos + HEADER_SIZE
            data_end = data_start + length
            if size < data_end + FOOTER_SIZE:
                break  # being written: wait for the rest
            record = buf[data_start:data_end]
            value = crc(record)
            if (((value >> 15) | (value << 17)) + _MASK_DELTA) & 0xFFFFFFFF != unpack_footer(buf, data_end)[0]:
                if self._resyncing:
                    pos += 1  # a header that only looked valid while scanning: keep scanning
                    continue
                self._report(pos, "bad data CRC")
                pos = data_end + FOOTER_SIZE
                continue
            self._resyncing = False
            append(record)
            pos = data_end + FOOTER_SIZE
        self._pending = buf[pos:]
        self.offset += pos
        return records

    def _corrupt(self, pos: int, reason: str) -> None:
        if not self._resyncing:
            self._report(pos, reason)
            self._resyncing = True

    def _report(self, pos: int, reason: str) -> None:
        self.corruptions.append(Corruption(self.offset + pos, reason))


def read_records(data: bytes) -> tuple[list[bytes], RecordReader]:
    """All complete records of a whole buffer, and the reader (for its corruptions and pending bytes)."""
    reader = RecordReader()
    return reader.feed(data), reader
