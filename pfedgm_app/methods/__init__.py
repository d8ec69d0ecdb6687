"""Client-side method plug-ins, selected by the `method` run-config key."""

from .base import ClientRun, Method
from .ditto import Ditto
from .fedavg import FedAvg, FedAvgFT, Local
from .pfedgm import PFedGM
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
    )
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}") from None


__all__ = ["METHODS", "ClientRun", "Method", "get_method"]
