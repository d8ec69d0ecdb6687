"""pFedGM (personalized federated learning via Gaussian generative modeling) as a Flower app.

Public parts for other projects: `pfedgm_app.strategies` (server, flwr + numpy),
`pfedgm_app.learning.phases` and `pfedgm_app.learning.gaussian` (client, torch),
`pfedgm_app.protocol.replies` (client handlers' replies, flwr).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pfedgm-app")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"
