"""What a method is, declared once as a `Method`: its `method` key, the paper's name for it, its
client plug-in, a one-line summary, its server strategy and its own hyperparameters.

Standard library only: the plug-in (torch) and the strategy (flwr) are named as strings and
imported when first used, so that the registry (`methods.METHODS`) parses a run-config without
torch (`pfedgm check`, in a fraction of a second).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pfedgm_app.runconfig.method_settings import NoSettings
from pfedgm_app.runconfig.settings import Settings

if TYPE_CHECKING:
    from pfedgm_app.strategies import PersonalizedFedAvg

    from .base import ClientPlugin


@dataclass(frozen=True)
class Method:
    """A method: its `method` key, the paper's name for it (`label`, the row of
    `pfedgm-paper`'s tables), its client plug-in (`"module:Class"` of `pfedgm_app.methods`, or
    the class itself), a one-line summary (run-config keys in backquotes; their defaults are
    added where it is shown, never typed), its server strategy (a name in
    `pfedgm_app.strategies`, or any `PersonalizedFedAvg` subclass) and its own hyperparameters.
    What leaves its clients (`sends`) and whether they keep arrays (`keeps_state`) come from
    the plug-in.
    """

    name: str
    label: str
    client: str | type[ClientPlugin]
    summary: str
    strategy: str | type[PersonalizedFedAvg] = "PersonalizedFedAvg"
    settings: type[Settings] = NoSettings

    def plugin_class(self) -> type[ClientPlugin]:
        """The client plug-in's class (its module imported now: torch)."""
        if isinstance(self.client, str):
            module, _, name = self.client.partition(":")
            return _attribute(f"pfedgm_app.methods.{module}", name)
        return self.client

    def strategy_class(self) -> type[PersonalizedFedAvg]:
        """The server strategy's class (`pfedgm_app.strategies` imported now: flwr)."""
        if isinstance(self.strategy, str):
            return _attribute("pfedgm_app.strategies", self.strategy)
        return self.strategy

    @property
    def sends(self) -> tuple[str, ...]:
        """The model parts whose arrays leave a client in a train reply."""
        return self.plugin_class().sends

    @property
    def keeps_state(self) -> bool:
        return self.plugin_class().keeps_state()

    def plugin(self, settings: Settings | None = None) -> ClientPlugin:
        """The client plug-in with `settings` (this method's defaults if None)."""
        return self.plugin_class()(settings if settings is not None else self.settings())


def _attribute(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)
