"""A trainer that hangs: `python3 hang_trainer.py ATTEMPTS FINISH_AT COMPILE_SECONDS`.

Every start is appended to ATTEMPTS (outside the worker homes, which a re-created TPU loses). It "compiles" for
COMPILE_SECONDS, prints five steps, then finishes if TPUOPS_RESTART >= FINISH_AT; else worker 1 blocks in
`stuck_reading_data` while the others wait for it in `wait_for_peers`, all alive, no step advancing.
"""

import os
import pathlib
import sys
import time

worker = int(os.environ["TPUOPS_WORKER_ID"])
restart = int(os.environ.get("TPUOPS_RESTART", "0"))
with pathlib.Path(sys.argv[1]).open("a") as attempts:
    attempts.write(f"w{worker} restart={restart} resume={os.environ.get('TPUOPS_RESUME', '0')}\n")
time.sleep(float(sys.argv[3]))
for step in range(1, 6):
    print(f"step {step}", flush=True)
    time.sleep(0.2)
if restart >= int(sys.argv[2]):
    sys.exit(0)


def stuck_reading_data() -> None:
    time.sleep(300)


def wait_for_peers() -> None:
    time.sleep(300)


(stuck_reading_data if worker == 1 else wait_for_peers)()
