"""`pfedgm`, the project's command line: outside the app package, so that no SuperNode or
ServerApp installs it (the FAB carries `pfedgm_app` only).

- `commands`: the click layer (`pfedgm check | run | predict | superlink | supernode`)
- `check`: a run-config checked on this machine before any run
- `flwr_cli`: a run submitted through `flwr run` and followed to its end (`run_app`), the
  one way every command, test and benchmark runs the app through Flower
- `flwr_calls`: Flower's CLI as subprocesses, its JSON answers read without trust
- `default_run`, `federation_args`: what a bare `pfedgm run` runs, and the checks of what goes
  to Flower besides the run-config
- `superlink`, `supernode`, `processes`: this user's managed SuperLink and SuperNodes
"""
