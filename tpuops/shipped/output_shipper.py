"""Keeps a run's output in the bucket as it goes, from the worker itself (shipped as text: standard library only).

Run detached beside the trainer (`python3 -S -c SOURCE CONFIG_JSON`) by launch. Every INTERVAL seconds, when the
run's output.log grew, the new complete lines go to the bucket as one numbered chunk object,
PREFIX/rRRR-NNNNNN (RRR: the run's restart, NNNNNN: the chunk's number), so a reader lists and concatenates them in
order; a recovered run (restart 1, 2, ...) writes under its first run's prefix and continues it. Which chunk and
offset come next is kept beside the output (`output.shipped`), written after each upload: a shipper started again
rewrites the same chunk with the same bytes, never a gap. When the run has ended (its exit code, a stop, or its
wrapper gone) the rest goes, and the shipper exits.

CONFIG: run_dir, restart, interval, and where: `dir` (the local simulator's bucket directory for PREFIX), or
`bucket` + `prefix` with `storage` (the JSON API's base URL) and `metadata_host` (for the service account's token,
through the part `metadata_token.py`, inlined by shipped.program).
"""

import json
import os
import sys
import time
from urllib.error import URLError
from urllib.parse import quote
from urllib.request import Request, urlopen

from tpuops.shipped.metadata_token import (  # shipped: replaced by metadata_token.py's text
    MetadataToken,
)

CHUNK_LIMIT = 4 * 1024 * 1024  # bytes per object at most
POLL_SECONDS = 1.0  # how often the end of the run is looked for
HTTP_TIMEOUT = 30


class Shipper:
    def __init__(self, config):
        self.config = config
        self.run_dir = os.path.expanduser(config["run_dir"])
        self.output = os.path.join(self.run_dir, "output.log")
        self.state_path = os.path.join(self.run_dir, "output.shipped")
        self.restart = int(config.get("restart", 0))
        self.token = MetadataToken(config.get("metadata_host"))
        state = self.read_state()
        self.seq, self.offset = state.get("seq", 0), state.get("offset", 0)

    def read_state(self):
        try:
            with open(self.state_path) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def save_state(self):
        temporary = self.state_path + ".tmp"
        with open(temporary, "w") as handle:
            json.dump({"seq": self.seq, "offset": self.offset}, handle)
        os.replace(temporary, self.state_path)

    def ended(self):
        for name in ("exit_code", "killed"):
            if os.path.exists(os.path.join(self.run_dir, name)):
                return True
        try:
            with open(os.path.join(self.run_dir, "pid")) as handle:
                os.kill(int(handle.read().strip()), 0)
        except (OSError, ValueError):
            return True  # the wrapper is gone without a word (killed): what it wrote is all there is
        return False

    def ship(self, final):
        """Send what is new (whole lines, unless `final`); True when something went."""
        try:
            size = os.path.getsize(self.output)
        except OSError:
            return False
        if size <= self.offset:
            return False
        with open(self.output, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, CHUNK_LIMIT))
        if not final and len(data) < CHUNK_LIMIT:
            end = data.rfind(b"\n")
            if end < 0:
                return False  # a line still being written
            data = data[:end + 1]
        self.put(f"r{self.restart:03d}-{self.seq:06d}", data)
        self.seq += 1
        self.offset += len(data)
        self.save_state()
        return True

    def put(self, name, data):
        if self.config.get("dir"):
            directory = self.config["dir"]
            os.makedirs(directory, exist_ok=True)
            temporary = os.path.join(directory, "." + name + ".tmp")
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, os.path.join(directory, name))
            return
        url = "{}/upload/storage/v1/b/{}/o?uploadType=media&name={}".format(
            self.config["storage"].rstrip("/"), quote(self.config["bucket"], safe=""),
            quote(self.config["prefix"].rstrip("/") + "/" + name, safe=""))
        headers = {"Authorization": "Bearer " + self.token.get(), "Content-Type": "text/plain"}
        urlopen(Request(url, data=data, headers=headers, method="POST"), timeout=HTTP_TIMEOUT).close()

    def run(self):
        interval = float(self.config.get("interval", 30))
        last = 0.0
        while True:
            ended = self.ended()
            if ended or time.monotonic() - last >= interval:
                last = time.monotonic()
                try:
                    while self.ship(final=ended) and ended:
                        pass  # at the end, everything, in as many chunks as it takes
                except (OSError, URLError, ValueError, KeyError) as err:
                    sys.stderr.write(f"tpuops output shipper: {err}\n")
                    if ended:
                        return 1
            if ended:
                return 0
            time.sleep(POLL_SECONDS)


def main(argv):
    return Shipper(json.loads(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
