"""Server-side strategies (flwr + numpy only; no models or data code of this app)."""

from .admission import ReplyAdmission
from .fedpac import FedPAC
from .personalization_result import PersonalizationResult, summarize
from .personalized_fedavg import PersonalizedFedAvg, merge_arrays
from .pfedfda import PFedFDA
from .pfedgm import PFedGM
from .sampling import sample_nodes, wait_for_nodes
from .window import WindowedGrid

__all__ = [
    "FedPAC",
    "PFedFDA",
    "PFedGM",
    "PersonalizationResult",
    "PersonalizedFedAvg",
    "ReplyAdmission",
    "WindowedGrid",
    "merge_arrays",
    "sample_nodes",
    "summarize",
    "wait_for_nodes",
]
