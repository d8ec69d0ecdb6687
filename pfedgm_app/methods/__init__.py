"""The method registry: every method is declared once, in its own module, as a `Method` (its
`method` key, the paper's name, client plug-in, server strategy, hyperparameters with their
meanings, summary), and listed here.

Run-config parsing, the strategy the ServerApp builds, the `pyproject.toml` keys (checked by a
test), the rows of the paper's tables (`paper.grid`), the method table of docs/methods.md
(`markdown_table`, written by `python -m devtools.reference`) and the keys of
docs/run-config.md all come from `METHODS`.
A method's `Settings` live in `method_settings`, which parses without torch (`pfedgm check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pfedgm_app.runconfig import method_settings
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError, Settings

from .base import ClientPlugin, ClientState, ClientTask, Method, Personalized, Reply
from .ditto import DITTO
from .fedavg import FEDAVG, FEDAVGFT, LOCAL
from .fedpac import FEDPAC
from .pfedfda import PFEDFDA
from .pfedgm import PFEDGM
from .pfedme import PFEDME
from .split import FEDBABU, FEDPER, FEDREP, LGFEDAVG

# In the paper's table order; adding a method is one entry here.
REGISTERED = (
    LOCAL,
    FEDAVG,
    FEDAVGFT,
    DITTO,
    FEDBABU,
    FEDPAC,
    FEDREP,
    LGFEDAVG,
    FEDPER,
    PFEDME,
    PFEDFDA,
    PFEDGM,
)
METHODS: dict[str, Method] = {m.name: m for m in REGISTERED}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; choose one of {list(METHODS)}") from None


def _settings() -> dict[str, type[Settings]]:
    """Each registered method's settings group, by name (what `method_settings` parses with)."""
    return {name: method.settings for name, method in METHODS.items()}


def settings_groups() -> list[type[Settings]]:
    """Every group of run-config keys: the common ones, then each method's (once each)."""
    return method_settings.settings_groups(_settings())


def run_config_keys() -> dict[str, Any]:
    """{key: default} of every run-config key (what `pyproject.toml` must declare)."""
    return method_settings.run_config_keys(_settings())


def parse_run_config(run_config: Mapping[str, Any]) -> tuple[RunConfig, Method, Settings]:
    """Flower's run-config -> (common settings, the chosen method, its settings), as
    `method_settings.parse` checks it: one ConfigError naming the key and how to fix it,
    before any data is loaded or any round runs."""
    cfg, settings = method_settings.parse(run_config, _settings())
    return cfg, METHODS[cfg.method], settings


def markdown_table() -> str:
    """The method table of docs/methods.md (`python -m devtools.reference` writes it)."""
    rows = [
        f"| `{m.name}` | {', '.join(m.sends) or 'nothing'} | `{m.strategy.__name__}` | "
        f"{m.summary} |"
        for m in METHODS.values()
    ]
    header = "| `method` | sends | strategy | what it does |\n|---|---|---|---|"
    return "\n".join([header, *rows])


__all__ = [
    "METHODS",
    "ClientPlugin",
    "ClientTask",
    "ClientState",
    "Method",
    "Personalized",
    "Reply",
    "get_method",
    "parse_run_config",
    "run_config_keys",
]
