"""A deployment message taken apart, from a SuperNode's log written with `FLWR_LOG_LEVEL=DEBUG`
(Flower's lines then carry millisecond timestamps) and `PYTHONPROFILEIMPORTTIME=1` (every
Python process, the ClientApp's too, writes each import's own microseconds to stderr).

A SuperNode answers one message at a time: it pulls the message from the SuperLink, its
SuperExec (asking every `FLWR_SUPEREXEC_TASK_POLL_INTERVAL`, 1 s by default) starts a fresh
`flwr-clientapp` process, which imports Flower, pulls the message, installs the FAB, imports
the app and runs its handler (the app's DEBUG line `node.log_timing`: data, model, compute),
pushes the reply and exits; the SuperNode sends the reply on. Each stage below is the time
between two of these lines; imports are the sums of the modules' own times, by package.
"""

from __future__ import annotations

import re
import statistics
from datetime import datetime
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINE = re.compile(
    r"^(DEBUG|INFO|WARNING|ERROR)\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\s*:\s*(.*)$"
)
IMPORT = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \| ( *)(\S+)$")
HANDLER = re.compile(r"pFedGM app: (\S+) handler: ((?:\w+ [\d.]+ s(?:, )?)+)")
PART = re.compile(r"(\w+) ([\d.]+) s")
# A module's import time goes to the outermost package the app imported it through (sympy
# to torch, pandas to datasets); these are reported apart, the rest as "other"
GROUPS = {
    "torch": "torch",
    "flwr": "flwr",
    "pfedgm_app": "app",
    "datasets": "datasets/pyarrow",
    "pyarrow": "datasets/pyarrow",
    "flwr_datasets": "datasets/pyarrow",
}
# (stage, what it is), in the order of a message; the stages add up to "total"
STAGES = (
    ("receive", "the SuperNode pulls the message from the SuperLink"),
    ("executor wait", "until the SuperExec's next poll takes the task"),
    ("process start", "a fresh `flwr-clientapp`: interpreter and Flower's imports"),
    ("pull", "the ClientApp pulls message, context and FAB from the SuperNode"),
    ("FAB install", "unpacking the FAB"),
    ("app load", "the app's modules imported (torch with them)"),
    ("data", "the client's data ready (decoded, or from the cache)"),
    ("model", "the model built from the message"),
    ("compute", "the handler's training or personalization"),
    ("handler, the rest", "run-config, seeds, threads"),
    ("reply", "the reply serialized, pushed to the SuperNode, process gone"),
    ("send", "the SuperNode sends the reply to the SuperLink"),
    ("total", "from the message pulled to the reply sent"),
)
# Import seconds by package within app load and handler (part of those stages, not added)
IMPORTS = tuple(f"imports: {g}" for g in ("torch", "app", "datasets/pyarrow", "flwr", "other"))


def _time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def import_seconds(lines: list[tuple[int, int, str]]) -> dict[str, float]:
    """Seconds by package of `-X importtime` lines (own microseconds, depth, module), in the
    order Python writes them (a module after the modules it imported)."""
    seconds: dict[str, float] = {}
    stack: list[tuple[int, str]] = []  # (depth, root package) of the ancestors
    for own, depth, module in reversed(lines):  # parents first
        while stack and stack[-1][0] >= depth:
            stack.pop()
        root = module.split(".")[0]
        through = next((r for _, r in stack if r != "pfedgm_app"), root)
        key = "imports: " + GROUPS.get(through, "other")
        seconds[key] = seconds.get(key, 0.0) + 1e-6 * own
        stack.append((depth, root))
    return seconds


def messages(log: Path) -> list[dict[str, float | str]]:
    """The messages of one SuperNode log, each {"type": ..., stage: seconds}."""
    found: list[dict] = []
    marks: dict = {}
    imports: list[tuple[int, int, str]] = []
    for raw in log.read_text(errors="replace").splitlines():
        line = ANSI.sub("", raw)
        if m := IMPORT.match(line):
            if "loading" in marks and "handler" not in marks:
                imports.append((int(m.group(1)), len(m.group(2)), m.group(3)))
            continue
        if not (m := LINE.match(line)):
            continue
        t, text = _time(m.group(2)), m.group(3)
        if text.startswith("Receiving: "):
            marks, imports = {"receiving": t}, []
            found.append({"type": text.split()[1]})
        elif not found:
            continue
        elif text.startswith("Received successfully"):
            marks.setdefault("received", t)
        elif text.startswith("Runtime.AcquireTask") and "start" not in marks:
            marks.setdefault("polls", []).append(t)
        elif text.startswith("Start `flwr-clientapp` process"):
            marks["start"] = t
        elif text.startswith("[flwr-clientapp] Start FAB installation"):
            marks["fab"] = t
        elif text.startswith("[flwr-clientapp] Start `ClientApp` Loading"):
            marks["loading"] = t
        elif text.endswith("handler starts"):
            marks["begin"] = t
        elif h := HANDLER.search(text):
            marks["handler"] = t
            found[-1].update({k: float(v) for k, v in PART.findall(h.group(2))})
        elif text.startswith("Finished task"):
            marks["finished"] = t
        elif text.startswith("Sending: "):
            marks["sending"] = t
        elif text.startswith("Sent successfully") and "sending" in marks:
            found[-1].update(_stages(marks, t, found[-1]), **import_seconds(imports))
    return [m for m in found if "total" in m]


def _stages(marks: dict, sent: float, parts: dict) -> dict[str, float]:
    """Seconds per stage of one message whose reply was sent at `sent`."""
    need = ("received", "polls", "fab", "loading", "begin", "handler", "finished")
    if any(k not in marks for k in need):
        return {}
    # The SuperExec's poll that took the task: the first after the message was stored, which
    # may be logged a moment before "Received successfully" (never after the task started)
    first = marks.get("start", marks["fab"])
    polls = [p for p in marks["polls"] if p <= first] or [first]
    after = [p for p in polls if p >= marks["received"]]
    marks["acquire"] = after[0] if after else polls[-1]
    marks.setdefault("start", marks["acquire"])  # a serving process started before: no start
    handler = sum(parts.get(k, 0.0) for k in ("data", "model", "compute"))
    return {
        "receive": marks["received"] - marks["receiving"],
        "executor wait": marks["acquire"] - marks["received"],
        "process start": marks["start"] - marks["acquire"],
        "pull": marks["fab"] - marks["start"],
        "FAB install": marks["loading"] - marks["fab"],
        "app load": marks["begin"] - marks["loading"],
        "handler, the rest": marks["handler"] - marks["begin"] - handler,
        "reply": marks["finished"] - marks["handler"],
        "send": sent - marks["sending"],
        "total": sent - marks["receiving"],
    }


def handler_parts(log: str) -> list[dict[str, float | str]]:
    """The app's timing lines in a log (a simulation's: its handlers' parts only)."""
    rows = []
    for h in HANDLER.finditer(ANSI.sub("", log)):
        rows.append({"type": h.group(1), **{k: float(v) for k, v in PART.findall(h.group(2))}})
    return rows


def table(rows: list[dict], kind: str) -> str:
    """min / median / max seconds of each stage over the messages of type `kind`."""
    rows = [r for r in rows if r["type"] == kind]
    if not rows:
        return f"(no {kind} message)"
    out = [
        f"{kind} messages: {len(rows)}",
        f"{'stage':<28}{'min s':>8}{'median s':>10}{'max s':>8}",
    ]
    for stage in [s for s, _ in STAGES] + list(IMPORTS):
        values = [float(r[stage]) for r in rows if stage in r]
        if values:
            out.append(
                f"{stage:<28}{min(values):8.2f}{statistics.median(values):10.2f}{max(values):8.2f}"
            )
    return "\n".join(out)
