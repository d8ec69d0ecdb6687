"""Client-side method plug-ins, selected by the `method` run-config key."""

from .base import EXTRAS_RECORD, ClientRun, Method
from .ditto import Ditto
from .fedavg import FedAvg, FedAvgFT, Local
from .fedpac import FedPAC
from .pfedfda import PFedFDA
from .pfedgm import PFedGM
from .pfedme import PFedMe
from .split import FedBABU, FedPer, FedRep, LGFedAvg

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        PFedGM(),
        FedAvg(),
        FedAvgFT(),
        Local(),
        Ditto(),
        FedBABU(),
        FedPer(),
        FedRep(),
        LGFedAvg(),
        FedPAC(),
        PFedMe(),
        PFedFDA(),
    )
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}") from None


__all__ = ["EXTRAS_RECORD", "METHODS", "ClientRun", "Method", "get_method"]
