"""`pfedgm run`'s checks of what goes to Flower besides the run-config, before anything is
submitted: the `--federation-config` keys of the simulation (Flower echoes a misspelt one
with underscores and no suggestion) and the SUPERLINK connection's name (Flower does not list
the names there are). Standard library only, like `pfedgm check`.
"""

from __future__ import annotations

import difflib
import shlex
import tomllib
from pathlib import Path

# The simulation's federation-config keys in Flower 1.42: the options of `flwr federation
# simulation-config --help` (tests/test_federation_args.py checks them against it).
SIMULATION_KEYS = (
    "num-supernodes",
    "client-resources-num-cpus",
    "client-resources-num-gpus",
    "verbose",
    "backend-name",
    "init-args-num-cpus",
    "init-args-num-gpus",
    "init-args-logging-level",
    "init-args-log-to-driver",
)


def federation_config_problems(values: list[str] | tuple[str, ...]) -> list[str]:
    """One line per `--federation-config` key the simulation does not know, with the nearest
    key it does."""
    problems = []
    for value in values:
        for item in shlex.split(value):
            key = item.partition("=")[0].strip()
            if key in SIMULATION_KEYS:
                continue
            near = difflib.get_close_matches(key.replace("_", "-"), SIMULATION_KEYS, n=1)
            hint = (
                f"; did you mean {near[0]}?" if near else f"; one of {', '.join(SIMULATION_KEYS)}"
            )
            problems.append(f"--federation-config {key}: not a key of Flower's simulation{hint}")
    return problems


def connection_problem(name: str, flwr_home: Path) -> str | None:
    """Why SUPERLINK `name` is not a connection of `flwr_home`/config.toml (naming those that
    are, the nearest first), or None when it is (or there is no file yet: Flower writes one)."""
    path = flwr_home / "config.toml"
    try:
        table = tomllib.loads(path.read_text()).get("superlink", {})
    except FileNotFoundError:
        return None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return f"SUPERLINK {name}: {path} cannot be read ({exc})"
    names = sorted(k for k, v in table.items() if isinstance(v, dict))
    if name in names:
        return None
    near = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return (
        f"SUPERLINK {name}: not a connection of {path}; {hint}its connections: "
        f"{', '.join(names) or '(none)'} (deploy/README.md adds one)"
    )
