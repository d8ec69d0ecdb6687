"""Server-side strategies (flwr + numpy only; no models or data code of this app).

- `personalized_fedavg`: `PersonalizedFedAvg`, FedAvg over a partial model (local keys kept)
  with a personalize round; the base of the others
- `pfedgm`: pFedGM's server side (Algorithm 1): phi, psi = {mu_k, b_k} and nu = {A_k} averaged
- `fedpac`, `pfedfda`: the server sides of FedPAC and pFedFDA
- `contract`, `admission`: what a reply must be, and which replies enter a round with what weight
- `robust`, `suspects`: how the admitted replies combine (clipping, mean, trimmed mean, median,
  Krum, Bulyan), and which of them moved a round more than one client's worth
- `sampling`, `window`, `probe`: which clients a round asks, the messages kept in flight, the
  handlers asked for before round 1
- `personalization_result`, `client_errors`: the personalize round's outcome; a failed
  ClientApp's own words
"""

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
