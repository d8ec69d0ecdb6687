"""Stop the managed SuperLink of an FLWR_HOME (tests, benchmarks): `stop_local_superlink`, the
app's (`pfedgm_app.superlink`, behind `pfedgm superlink stop`), under the name the tests and
benchmarks import. Runs are submitted with `pfedgm_app.paper.flwr_cli.run_app`.
"""

from __future__ import annotations

from pfedgm_app.superlink import stop_local_superlink

__all__ = ["stop_local_superlink"]
