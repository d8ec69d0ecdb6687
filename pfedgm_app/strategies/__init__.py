"""Server-side strategies (flwr + numpy only; no models or data code of this app)."""

from .fedpac import FedPAC
from .personalized import (
    PersonalizationResult,
    PersonalizedFedAvg,
    RoundHook,
    merge_arrays,
    summarize,
    wait_for_nodes,
)
from .pfedfda import PFedFDA
from .pfedgm import PFedGM
from .window import WindowedGrid

__all__ = [
    "FedPAC",
    "PFedFDA",
    "PFedGM",
    "PersonalizationResult",
    "PersonalizedFedAvg",
    "RoundHook",
    "WindowedGrid",
    "merge_arrays",
    "summarize",
    "wait_for_nodes",
]
