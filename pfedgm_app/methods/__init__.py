"""The method registry: every method is declared once, in its own module, as a `Method` (its
`method` key, the paper's name, client plug-in, server strategy, hyperparameters with their
meanings, summary), and listed here.

Run-config parsing, the strategy the ServerApp builds, the `pyproject.toml` keys (checked by a
test), the rows of the paper's tables (`paper.grid`), the method table of docs/methods.md
(`python -m pfedgm_app.methods`) and the keys of docs/run-config.md all come from `METHODS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import ConfigError, RunConfig, Settings
from ..presets import apply_preset
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


def settings_groups() -> list[type[Settings]]:
    """Every group of run-config keys: the common ones, then each method's (once each)."""
    groups: list[type[Settings]] = [RunConfig]
    for method in METHODS.values():
        if method.settings not in groups:
            groups.append(method.settings)
    return groups


def run_config_keys() -> dict[str, Any]:
    """{key: default} of every run-config key (what `pyproject.toml` must declare)."""
    keys: dict[str, Any] = {}
    for group in settings_groups():
        for key, default in group.keys().items():
            if key in keys:
                raise RuntimeError(f"run-config key {key!r} is declared by two settings groups")
            keys[key] = default
    return keys


def parse_run_config(run_config: Mapping[str, Any]) -> tuple[RunConfig, Method, Settings]:
    """Flower's run-config -> (common settings, the chosen method, its settings).

    A `preset` (`presets.py`) fills the keys left at their defaults. Every key is checked, the
    other methods' too (a bad value is an error even where unused);
    unknown keys are an error. Raises one ConfigError naming the key and how to fix it, before
    any data is loaded or any round runs.
    """
    known = run_config_keys()
    unknown = sorted(set(run_config) - set(known))
    if unknown:
        raise ConfigError(f"unknown run-config key(s) {unknown}; known keys: {sorted(known)}")
    run_config = apply_preset(dict(run_config), known)
    unknown = sorted(set(run_config) - set(known))
    if unknown:
        raise ConfigError(f"preset {run_config['preset']!r} sets unknown key(s) {unknown}")
    cfg = RunConfig.from_run_config(run_config)
    method = get_method(cfg.method)
    cfg.validate()
    for group in settings_groups()[1:]:
        group.from_run_config(run_config).validate(cfg)
    return cfg, method, method.settings.from_run_config(run_config)


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
