"""A federation of real SuperLink and SuperNode processes on this machine (the deployment
path: one process per SuperNode), insecure or as `deploy/README.md`'s secure deployment, for
tests and benchmarks. Runs are submitted to it with `pfedgm_cli.flwr_cli.run_app`.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from pfedgm_cli.flwr_calls import flwr, flwr_json, free_port
from pfedgm_cli.processes import kill, process_tree


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' options for how SuperNodes run their ClientApps (`executor_env`,
    `start_deployment(superexec=...)`)."""
    parser.add_argument("--task-poll", type=float, help="FLWR_SUPEREXEC_TASK_POLL_INTERVAL (s)")
    parser.add_argument(
        "--superexec",
        help="the SuperNodes' executor, run by us beside `--isolation process` (e.g. "
        "warm-subprocess, with Flower patched as docs/upstream/clientapp-process.md)",
    )


def executor_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment `--task-poll` asks of the SuperNodes' SuperExec."""
    if args.task_poll is None:
        return {}
    return {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(args.task_poll)}


@dataclass
class Deployment:
    """A SuperLink and its SuperNodes running as separate processes on this machine."""

    federation: str
    processes: list[subprocess.Popen]
    supernode_args: list[str] = field(default_factory=list)  # TLS flags and the SuperLink
    env: dict[str, str] = field(default_factory=dict)
    logs: Path = Path(".")
    # Set: each SuperNode runs `--isolation process` beside a `flower-superexec --executor
    # <this>` of ours (e.g. "warm-subprocess" of docs/upstream/clientapp-process.md)
    superexec: str | None = None
    executors: list[subprocess.Popen] = field(default_factory=list)

    def add_supernode(self, node_config: str, key: Path | None = None) -> int:
        """Start one more SuperNode (a device that joins now), signing with `key` where the
        SuperLink authenticates SuperNodes; returns its index (for `kill_supernode`, and its
        log `supernode-<index>.log`)."""
        index = len(self.processes) - 1
        cmd = ["flower-supernode", *self.supernode_args]
        if key is not None:
            cmd += ["--auth-supernode-private-key", str(key)]
        port = free_port()
        cmd += ["--port", str(port), "--node-config", node_config]
        if self.superexec:
            cmd += ["--isolation", "process"]
        log = self.logs / f"supernode-{index}.log"
        self.processes.append(_spawn(cmd, self.env, log))
        if self.superexec:  # its ClientApps write into the SuperNode's log, as in subprocess mode
            executor = [
                "flower-superexec",
                "--runtime-api-address",
                f"127.0.0.1:{port}",
                "--insecure",
                "--executor",
                self.superexec,
                "--parent-pid",
                str(self.processes[-1].pid),
            ]
            self.executors.append(_spawn(executor, self.env, log))
        return index

    def stop(self) -> None:
        """Stop every process of the deployment and what each spawned (SuperExec, ClientApps)."""
        kill(process_tree([p.pid for p in self.processes + self.executors]))

    def kill_supernode(self, index: int) -> None:
        """Kill the `index`-th SuperNode and its ClientApps, as a device that dies."""
        kill(process_tree([self.processes[1 + index].pid]))


def start_deployment(
    flwr_home: Path,
    node_configs: list[str],
    env: dict[str, str],
    federation: str = "deployment",
    startup_timeout: float = 120,
    certs: Path | None = None,
    registered: Collection[int] | None = None,
    superexec: str | None = None,
) -> Deployment:
    """Start `flower-superlink` and one `flower-supernode` per entry of `node_configs` (their
    `--node-config`, e.g. "partition-id=0 num-partitions=2") on free local ports, and register
    them as `federation` in `$FLWR_HOME/config.toml`. Logs go to `flwr_home/<process>.log`.
    Call `.stop()` when done.

    Insecure by default. With `certs`, a folder written by `deploy/make-certs.sh`, it is the
    secure deployment of deploy/README.md, so that tests exercise what a user runs: the
    SuperLink serves TLS with `server.crt` (SuperNodes and `flwr` verify it with `ca.crt`).
    With `registered` too (indices into `node_configs`), the SuperLink runs
    `--enable-supernode-auth`, SuperNode i signs with its key `certs/device-<i>`, and only the
    `registered` nodes' public keys are registered (`flwr supernode register`, as a user
    would) before any SuperNode starts: the others are refused and exit (their log says why).
    """
    if superexec is not None and certs is not None:
        raise ValueError("a SuperExec of ours (`superexec`) runs on loopback without TLS")
    if registered is not None and certs is None:
        raise ValueError("SuperNode authentication (`registered`) needs TLS (`certs`)")
    if not set(registered or ()) <= set(range(len(node_configs))):
        raise ValueError(f"`registered` {registered} names SuperNodes that are not started")
    keys = certs.resolve() if certs is not None and registered is not None else None
    flwr_home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    link = [
        "flower-superlink",
        *_tls_args(certs, "superlink"),
        "--port",
        str(port),
        "--disable-runtime-dependency-installation",
        "--database",
        str(flwr_home / f"{federation}.db"),
    ]
    if keys is not None:
        link.append("--enable-supernode-auth")  # only registered public keys may join
    supernode = [*_tls_args(certs, "supernode"), "--superlink", f"127.0.0.1:{port}"]
    deployment = Deployment(federation, [], supernode, env, flwr_home, superexec)
    deployment.processes.append(_spawn(link, env, flwr_home / "superlink.log"))
    try:
        _wait_for_port(port, startup_timeout)
        _add_federation(flwr_home, federation, port, certs)
        for i in sorted(registered or ()) if keys is not None else ():
            _register_supernode(keys / f"device-{i}.pub", federation, env)
        for i, node_config in enumerate(node_configs):
            deployment.add_supernode(node_config, keys / f"device-{i}" if keys else None)
    except BaseException:
        deployment.stop()
        raise
    return deployment


def _tls_args(certs: Path | None, role: str) -> list[str]:
    """`flower-superlink` / `flower-supernode` flags for TLS from `certs`, or `--insecure`."""
    if certs is None:
        return ["--insecure"]
    certs = certs.resolve()
    if role == "supernode":
        return ["--root-certificates", str(certs / "ca.crt")]
    return [
        "--ssl-ca-certfile",
        str(certs / "ca.crt"),
        "--ssl-certfile",
        str(certs / "server.crt"),
        "--ssl-keyfile",
        str(certs / "server.key"),
    ]


def _add_federation(flwr_home: Path, federation: str, port: int, certs: Path | None) -> None:
    """The `[superlink.<federation>]` entry `flwr` commands use (TLS: verified with ca.crt)."""
    config = flwr_home / "config.toml"
    text = config.read_text() if config.exists() else _DEFAULT_CONFIG
    text += f'\n[superlink.{federation}]\naddress = "127.0.0.1:{port}"\n'
    if certs is None:
        text += "insecure = true\n"
    else:
        text += f"root-certificates = {json.dumps(str(certs.resolve() / 'ca.crt'))}\n"
    config.write_text(text)


def _register_supernode(public_key: Path, federation: str, env: dict[str, str]) -> int:
    """Register a device's public key on the SuperLink with `flwr supernode register`; returns
    the node id the SuperLink gives it."""
    args = ["supernode", "register", str(public_key), federation, "--format", "json"]
    out = flwr(args, env, check=False)
    answer = flwr_json(out.stdout)
    if out.returncode or not answer.get("success"):
        raise RuntimeError(
            f"flwr supernode register {public_key} failed:\n{out.stdout}{out.stderr}"
        )
    return int(answer["node-id"])


_DEFAULT_CONFIG = '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait_for_port(port: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the SuperLink did not open port {port} within {timeout}s")
