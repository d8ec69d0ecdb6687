"""One line of figures per round for the log (`round_line`): what a user watching a run wants
from the thirty keys of its `rounds.jsonl` line, which stays as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .plots import EVAL_MEAN


def clock(seconds: float) -> str:
    """Seconds as h:mm:ss (m:ss under an hour)."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) else None


def round_line(
    row: Mapping[str, Any], last: int, sitting_rounds: int, sitting_seconds: float
) -> str:
    """`row` (a round's `rounds.jsonl` line) as "round r/N: loss ... | replies ... | s ...":
    the train loss (pFedGM's H and R_c terms where sent), the replies used, dropped and
    clipped, the personalized accuracy where the round evaluated, then the round's seconds,
    the run's so far and the time left at this sitting's pace (`sitting_rounds` rounds in
    `sitting_seconds`, the rounds to `last` left)."""
    r = int(row["round"])
    parts = []
    if (loss := _number(row, "loss")) is not None:
        terms = [
            (n, _number(row, k)) for n, k in (("H", "loss-shared"), ("R_c", "loss-personalized"))
        ]
        shown = ", ".join(f"{n} {v:.4g}" for n, v in terms if v is not None)
        parts.append(f"loss {loss:.4g}" + (f" ({shown})" if shown else ""))
    used, dropped = _number(row, "num-clients"), _number(row, "replies-dropped")
    clipped = _number(row, "updates-clipped")
    if used is not None or dropped:
        replies = [f"{int(used or 0)} used", f"{int(dropped or 0)} dropped"]
        replies += [f"{int(clipped)} clipped"] if clipped else []
        parts.append("replies " + ", ".join(replies))
    if (epsilon := _number(row, "dp-epsilon")) is not None:
        parts.append(f"epsilon {epsilon:.3g}")
    if (accuracy := _number(row, EVAL_MEAN)) is not None:
        parts.append(f"personalized accuracy {accuracy:.2f} %")
    pace = sitting_seconds / max(sitting_rounds, 1)
    seconds = _number(row, "seconds") or 0.0
    elapsed = _number(row, "seconds-elapsed") or 0.0
    time = f"{seconds:.1f} s, {clock(elapsed)} so far, {clock(pace * max(last - r, 0))} left"
    return f"round {r}/{last}: " + " | ".join([*parts, time])
