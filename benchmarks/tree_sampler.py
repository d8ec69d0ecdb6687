"""Where the CPU and memory of a `flwr run` simulation go: a sampler of the managed
SuperLink's process tree (`superlink_tree`) that sums its memory and splits its CPU seconds by
role (ClientApps, the simulation engine, the SuperLink, Ray) against this benchmark's own and
the machine's idle time. Linux only (/proc). `bench_speed` and `bench_scale` run one beside
their runs.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pfedgm_cli.processes import cmdline
from pfedgm_cli.superlink import superlink_tree

ROLES = ("ClientApps", "simulation engine", "SuperLink", "Ray")
MACHINE = ("this benchmark", "idle", "anything else")  # the rest of every core's time


def role_of(cmdline: str) -> str:
    """Which part of a `flwr run` simulation a process of the SuperLink's tree is."""
    if "ClientAppActor" in cmdline:
        return "ClientApps"
    if "flwr-simulation" in cmdline:  # the engine's threads, the ServerApp, the link state
        return "simulation engine"
    if "flower-superlink" in cmdline or "flower-superexec" in cmdline:
        return "SuperLink"
    return "Ray"  # raylet, GCS, dashboard, idle workers


class TreeSampler(threading.Thread):
    """Every 2 s (a scan of /proc in Python: sparse, since it shares the cores with the run):
    the summed RSS of the SuperLink's process tree (simulation, Ray, ClientApps), its CPU
    seconds by role (`role_of`; a process keeps the first ClientApp role seen, as Ray renames
    an actor's process by its task), this benchmark's own CPU seconds and the machine's idle
    seconds (whatever is left of the cores is "anything else"), and how many rounds
    `rounds.jsonl` holds, so the CPU of the later rounds can be told from start-up and
    Phase 2."""

    def __init__(self, flwr_home: Path, rounds_file: Path) -> None:
        super().__init__(daemon=True)
        self.marker, self.rounds_file = str(flwr_home), rounds_file
        self.peak, self.stop = 0, threading.Event()
        self.roles: dict[int, str] = {}
        self.cpu: dict[int, float] = {}  # pid -> latest CPU seconds (exited ones keep theirs)
        self.samples: list[tuple[float, int, dict[str, float]]] = []  # (time, rounds, by role)

    def run(self) -> None:
        while not self.stop.wait(2.0):
            tree, rss = superlink_tree(self.marker), 0
            for pid in tree:
                rss += _rss(pid)
                if self.roles.get(pid) != "ClientApps":
                    self.roles[pid] = role_of(cmdline(pid))
                self.cpu[pid] = _cpu_seconds(pid) or self.cpu.get(pid, 0.0)
            self.peak = max(self.peak, rss)
            by_role = dict.fromkeys(ROLES, 0.0)
            for pid, seconds in self.cpu.items():
                by_role[self.roles[pid]] += seconds
            by_role["this benchmark"] = _cpu_seconds(os.getpid(), reaped=True)  # + `flwr list`
            by_role["idle"] = _idle_seconds()
            rounds = (
                len(self.rounds_file.read_text().splitlines()) if self.rounds_file.exists() else 0
            )
            self.samples.append((time.time(), rounds, by_role))

    def cores_in_rounds(self) -> dict[str, float]:
        """Cores each role kept busy from the first round's end to the last's (as sampled;
        NaN when the rounds were too short to be sampled twice)."""
        done = [s for s in self.samples if s[1] >= 1]
        last = [s for s in done if s[1] == done[-1][1]][:1] if done else []
        wall = last[0][0] - done[0][0] if last else 0.0
        if wall <= 0:
            return dict.fromkeys(ROLES + MACHINE, float("nan"))
        cores = {role: (last[0][2][role] - done[0][2][role]) / wall for role in last[0][2]}
        cores["anything else"] = (os.cpu_count() or 1) - sum(cores.values())
        return cores


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _idle_seconds() -> float:
    """Seconds all cores of the machine have been idle (idle + iowait of /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int, reaped: bool = False) -> float:
    """utime + stime of `pid`, with `reaped`: and of its children it has waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11 : 15 if reaped else 13])
    return ticks / os.sysconf("SC_CLK_TCK")
