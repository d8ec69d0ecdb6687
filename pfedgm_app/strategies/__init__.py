"""Server-side strategies (flwr + numpy only; no models or data code of this app)."""

from .personalized import PersonalizationResult, PersonalizedFedAvg, merge_arrays, summarize
from .pfedgm import PFedGM

__all__ = ["PFedGM", "PersonalizationResult", "PersonalizedFedAvg", "merge_arrays", "summarize"]
