"""Server-side strategies (flwr + numpy only; no models or data code of this app)."""

from .fedpac import FedPAC
from .personalized import PersonalizationResult, PersonalizedFedAvg, merge_arrays, summarize
from .pfedfda import PFedFDA
from .pfedgm import PFedGM

__all__ = [
    "FedPAC",
    "PFedFDA",
    "PFedGM",
    "PersonalizationResult",
    "PersonalizedFedAvg",
    "merge_arrays",
    "summarize",
]
