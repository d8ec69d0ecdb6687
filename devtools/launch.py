"""Stop the managed SuperLink of an FLWR_HOME (tests, benchmarks).

Not part of the app (it manages processes: /proc scans, signals): a helper of `tests/` and
`benchmarks/`, imported as `devtools.launch` from the repository root. Runs are submitted with
`pfedgm_app.paper.flwr_cli.run_app`.
"""

from __future__ import annotations

from pathlib import Path

from devtools.processes import kill, superlink_tree


def stop_local_superlink(flwr_home: Path) -> int:
    """Stop the managed SuperLink that `flwr run` started for `flwr_home` (or any FLWR_HOME below
    that folder), with every process it spawned (SuperExec, the simulation, its Ray cluster).
    Returns how many processes were signalled.
    """
    doomed = superlink_tree(flwr_home)
    kill(doomed)
    return len(doomed)
