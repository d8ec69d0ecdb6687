"""Stopping SuperNodes (`pfedgm supernode stop`) and deploy/README.md's federation entry.

A SuperNode stopped by its PID alone leaves its `flower-superexec` (and the ClientApp it runs)
alive until that notices, seconds to tens of seconds later; the command stops a SuperNode
with everything it started, and a SuperExec started beside it, and leaves every other
SuperNode, and every other user's process, alone. deploy/README.md writes its federation into
`$FLWR_HOME/config.toml` (default ~/.flwr), where `flwr` reads it."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from devtools.deployment import start_deployment
from pfedgm_cli import processes
from pfedgm_cli import supernode as supernode_module
from pfedgm_cli.commands import main
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.processes import alive, process_tree
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_cli.supernode import select, supernode_tree, supernodes

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "README.md"

# A machine as /proc shows it: {pid: (parent, uid, argv)}. 10: a SuperNode of ours with its
# SuperExec 11 and that one's ClientApp 12; 20: a SuperNode of ours of `--isolation process`,
# served by SuperExec 21 (`--parent-pid 20`, not its child); 30: another user's SuperNode
# dialling the same SuperLink, with its SuperExec 31; 40: a SuperExec of ours watching 30.
PY = "/usr/bin/python3"
TABLE = {
    10: (1, 0, [PY, "/bin/flower-supernode", "--insecure", "--superlink", "h:8000", "--port",
                "9094", "--node-config", "partition-id=0"]),
    11: (10, 0, [PY, "/bin/flower-superexec", "--insecure", "--parent-pid", "10"]),
    12: (11, 0, [PY, "/bin/flwr-clientapp", "--parent-pid", "11"]),
    20: (1, 0, ["flower-supernode", "--insecure", "--superlink=h:8000", "--isolation",
                "process", "--port=9095"]),
    21: (1, 0, [PY, "/bin/flower-superexec", "--insecure", "--parent-pid", "20"]),
    30: (1, 1001, [PY, "/bin/flower-supernode", "--insecure", "--superlink", "h:8000"]),
    31: (30, 1001, [PY, "/bin/flower-superexec", "--parent-pid", "30"]),
    40: (1, 0, [PY, "/bin/flower-superexec", "--parent-pid", "30"]),
}  # fmt: skip


@pytest.fixture
def machine(monkeypatch):
    """`pfedgm_cli.supernode` sees TABLE instead of /proc, as user 0."""
    parents = {pid: parent for pid, (parent, _, _) in TABLE.items()}
    for module in (processes, supernode_module):
        monkeypatch.setattr(module, "parent_pids", lambda: dict(parents))
    monkeypatch.setattr(supernode_module, "argv", lambda pid: TABLE[pid][2])
    monkeypatch.setattr(supernode_module, "mine", lambda pid: TABLE[pid][1] == 0)


def test_supernodes_are_found_by_their_command_line_and_only_ours(machine):
    """Both command-line forms (`--port 9094`, `--port=9095`) read; another user's SuperNode
    is not listed, even on the same SuperLink; the tree of a SuperNode takes its child
    SuperExec and ClientApp, or the SuperExec that names it as `--parent-pid`; a name that
    matches nothing selects nothing, and no name selects nothing."""
    nodes = supernodes()
    assert [(n.pid, n.port, n.superlink) for n in nodes] == [(10, 9094, "h:8000"),
                                                             (20, 9095, "h:8000")]  # fmt: skip
    assert nodes[0].node_config == "partition-id=0"
    assert supernode_tree([10]) == {10, 11, 12}
    assert supernode_tree([20]) == {20, 21}
    assert supernode_tree([30]) == {40}  # ours only: never 30 or 31 (another user's)
    assert [n.pid for n in select(nodes, ports={9095})] == [20]
    assert [n.pid for n in select(nodes, superlinks={"h:8000"})] == [10, 20]
    assert [n.pid for n in select(nodes, pids={10}, ports={9095})] == [10, 20]
    assert select(nodes) == [] and select(nodes, ports={1}) == []
    assert [n.pid for n in select(nodes, everything=True)] == [10, 20]


def test_stop_without_a_name_lists_and_refuses(machine):
    """No name: the SuperNodes there are and exit 2 (nothing stopped); a PID that is not one of
    our SuperNodes (another user's, or a SuperExec) is refused by name."""
    result = CliRunner().invoke(main, ["supernode", "stop"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        '10  port 9094  superlink h:8000  node-config "partition-id=0"',
        "20  port 9095  superlink h:8000",
        "pfedgm supernode stop: name SuperNodes (PID, --port, --superlink) or --all",
    ]
    result = CliRunner().invoke(main, ["supernode", "stop", "30", "11"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "pfedgm supernode stop: 30 is no SuperNode of yours",
        "pfedgm supernode stop: 11 is no SuperNode of yours",
    ]


def test_deploy_readme_writes_federations_under_flwr_home():
    """Every config.toml the deployment page writes is `$FLWR_HOME`'s (default ~/.flwr), never
    a fixed ~/.flwr that a set FLWR_HOME would not read."""
    text = DEPLOY.read_text()
    writes = re.findall(r">>? *(\S*config\.toml\"?)", text)
    assert len(writes) == 3
    assert set(writes) == {'"${FLWR_HOME:-$HOME/.flwr}/config.toml"', '"$FLWR_HOME/config.toml"'}


def _insecure_block() -> str:
    """The shell block of deploy/README.md's insecure section."""
    section = DEPLOY.read_text().split("## Insecure, on a trusted network", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.mark.e2e
def test_supernode_stop_ends_supernodes_with_their_children_and_no_other(tmp_path):
    """Three SuperNodes on loopback: two started as deploy/README.md starts them (a SuperExec
    child each), one of `--isolation process` with a SuperExec beside it. `pfedgm supernode
    stop --port A --port C` returns with both and every process of theirs gone, the second
    SuperNode, its SuperExec and the SuperLink running. Before that, the insecure section's
    lines that write the federation `mine`, run with a fresh FLWR_HOME, give a `flwr` that
    reaches the SuperLink through it."""
    home = tmp_path / "flwr-home"
    env = offline_env(home)
    nodes = [f"partition-id={i} num-partitions=3" for i in range(2)]
    deployment = start_deployment(home, nodes, env)
    try:
        deployment.superexec = "subprocess"  # the next SuperNode: --isolation process
        deployment.add_supernode("partition-id=2 num-partitions=3")
        link, pids = deployment.processes[0], [p.pid for p in deployment.processes[1:]]
        beside = deployment.executors[0].pid  # SuperNode 2's SuperExec, not its child
        deadline = time.monotonic() + 120
        while not all(len(process_tree([p])) >= 2 for p in pids[:2]):  # their SuperExecs up
            assert time.monotonic() < deadline, [process_tree([p]) for p in pids]
            time.sleep(0.5)
        address = deployment.supernode_args[deployment.supernode_args.index("--superlink") + 1]
        docs = {**env, "FLWR_HOME": str(tmp_path / "docs-home")}
        config = [line for line in _insecure_block().splitlines()
                  if line.startswith("flwr config") or "config.toml" in line]  # fmt: skip
        assert len(config) == 2, config
        script = "\n".join(config).replace("HOST:8000", address)
        subprocess.run(["bash", "-euc", script], env=docs, check=True, capture_output=True)
        listed = subprocess.run(["flwr", "list", "mine", "--format", "json"], env=docs,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        found = {n.pid: n for n in supernodes()}
        stopped, kept = process_tree([pids[0], pids[2], beside]), process_tree([pids[1]])
        ports = [str(found[pids[i]].port) for i in (0, 2)]
        result = CliRunner().invoke(main, ["supernode", "stop", "--port", ports[0],
                                           "--port", ports[1]])  # fmt: skip
        survivors = {p for p in stopped if alive(p)}
        untouched = all(alive(p) for p in kept) and link.poll() is None
    finally:
        deployment.stop()
        stop_local_superlink(home)
    assert '"success": true' in listed.stdout, listed.stdout + listed.stderr
    assert result.exit_code == 0, result.output
    assert [line.split()[:3] for line in result.output.splitlines()] == [
        ["stopped", "SuperNode", str(pids[0])],
        ["stopped", "SuperNode", str(pids[2])],
    ]
    assert len(stopped) >= 4 and beside in stopped and survivors == set(), (stopped, survivors)
    assert untouched, kept
