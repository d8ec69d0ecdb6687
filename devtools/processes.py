"""Process trees on Linux (/proc): a managed SuperLink and everything it spawned, and stopping
them. The code is the app's (`pfedgm_app.processes` and `pfedgm_app.superlink`, behind `pfedgm
superlink stop` and `pfedgm supernode stop`); this module keeps the names the devtools, tests
and benchmarks import."""

from __future__ import annotations

from pfedgm_app.processes import cmdline, kill, process_tree
from pfedgm_app.superlink import superlink_tree

__all__ = ["cmdline", "kill", "process_tree", "superlink_tree"]
