"""This user's SuperNodes on this machine (`pfedgm supernode list` and `stop`).

A `flower-supernode` starts a `flower-superexec` (which starts a ClientApp process per
message); one started with `--isolation process` is served by a `flower-superexec` started
beside it with `--parent-pid <its pid>`. Stopped alone by its PID, a SuperNode leaves those
running (each notices its parent's end by polling and shuts down in its own time, seconds to
tens of seconds, a ClientApp holding its memory meanwhile). `stop_supernodes` stops a SuperNode
with every process below it and every SuperExec that names it as its parent, and nothing of
another user. Linux only (/proc).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from .processes import argv, kill, mine, parent_pids, process_tree

DEFAULT_PORT = 9094  # flower-supernode's Runtime API port without `--port` (Flower 1.42)
GRACE_SECONDS = 10.0  # a SuperNode told SIGTERM leaves its SuperLink in a few seconds


@dataclass(frozen=True)
class SuperNode:
    """A running `flower-supernode` of this user, as its command line gives it."""

    pid: int
    port: int  # its Runtime API port (`--port`): one SuperNode per port on a machine
    superlink: str  # the SuperLink address it dials (`--superlink`), "" when not given
    node_config: str  # its `--node-config`, "" when not given

    def describe(self) -> str:
        """One line: PID, port, SuperLink and node config, as `pfedgm supernode list` shows it."""
        line = f"{self.pid}  port {self.port}  superlink {self.superlink or '-'}"
        return line + (f'  node-config "{self.node_config}"' if self.node_config else "")


def supernodes() -> list[SuperNode]:
    """This user's running SuperNodes, by PID."""
    found = []
    for pid in sorted(parent_pids()):
        args = _supernode_args(pid)
        if args is not None and mine(pid):
            port = _option(args, "--port")
            found.append(
                SuperNode(
                    pid,
                    int(port) if port and port.isdigit() else DEFAULT_PORT,
                    _option(args, "--superlink") or "",
                    _option(args, "--node-config") or "",
                )
            )
    return found


def select(
    nodes: Iterable[SuperNode],
    pids: Collection[int] = (),
    ports: Collection[int] = (),
    superlinks: Collection[str] = (),
    everything: bool = False,
) -> list[SuperNode]:
    """The SuperNodes among `nodes` named by PID, Runtime API port or SuperLink address (any
    of them), or all of them with `everything`; none when nothing names them, so that no call
    stops every SuperNode by accident."""
    return [
        n
        for n in nodes
        if everything or n.pid in pids or n.port in ports or n.superlink in superlinks
    ]


def supernode_tree(pids: Collection[int]) -> set[int]:
    """`pids`, every process below them, and every process of this user started with
    `--parent-pid` naming one of them (a SuperExec beside a SuperNode of `--isolation
    process`) with the processes below it. Collected whole before anything is stopped."""
    watchers = [
        pid
        for pid in parent_pids()
        if (parent := _option(argv(pid), "--parent-pid")) and parent.isdigit()
        if int(parent) in pids and mine(pid)
    ]
    return {p for p in process_tree([*pids, *watchers]) if mine(p)}


def stop_supernodes(nodes: Iterable[SuperNode], grace: float = GRACE_SECONDS) -> dict[int, int]:
    """Stop `nodes` and everything they started (SIGTERM, then SIGKILL after `grace` seconds
    for what is left); returns {SuperNode PID: processes stopped with it}."""
    trees = {n.pid: supernode_tree([n.pid]) for n in nodes}
    kill(set().union(*trees.values()), grace)
    return {pid: len(tree) for pid, tree in trees.items()}


def _supernode_args(pid: int) -> list[str] | None:
    """The arguments after `flower-supernode` when `pid` runs it (directly, or as the script
    of a Python interpreter), else None."""
    args = argv(pid)
    for i, arg in enumerate(args[:2]):
        if os.path.basename(arg) == "flower-supernode":
            return args[i + 1 :]
    return None


def _option(args: list[str], name: str) -> str | None:
    """The value of option `name` ("--port 9094" or "--port=9094") in `args`, or None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None
