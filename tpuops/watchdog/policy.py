"""What to do about a confirmed hang: restart, re-create the TPU, or stop and keep the TPU for the user.

At most `restarts_per_window` (2) restarts in `window` (an hour). The same worker found to be the odd one in
two hangs of the window looks like bad hardware: the TPU is re-created instead of relaunched. After a
re-create, or once the restarts are used up, the next hang stops the restarting: the TPU and the hung run stay
as they are, for the user to look at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tpuops.state import epoch_seconds
from tpuops.watchdog.records import Incident

Action = Literal["restart", "recreate", "stop"]


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str


def decide(history: Sequence[Incident], odd_worker: str | None, now: float, *, restarts_per_window: int,
           window: float) -> Decision:
    recent = [i for i in history if (epoch_seconds(i.at) or 0.0) > now - window]
    acted = [i for i in recent if i.action in ("restart", "recreate")]
    span = f"{window / 3600:g}h" if window >= 3600 else f"{window:g}s"
    if any(i.action == "recreate" for i in acted):
        return Decision("stop", f"hung again after the TPU was re-created within {span}")
    if len(acted) >= restarts_per_window:
        return Decision("stop", f"{len(acted)} restart(s) for hangs within {span} already "
                                f"(at most {restarts_per_window})")
    if odd_worker is not None and any(i.odd_worker == odd_worker for i in acted):
        return Decision("recreate", f"{odd_worker} was the odd worker twice within {span}")
    return Decision("restart", f"restart {len(acted) + 1} of at most {restarts_per_window} within {span}")
