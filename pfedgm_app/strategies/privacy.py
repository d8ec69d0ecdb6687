"""Client-level differential privacy (DP-FedAvg, McMahan et al. 2018, "Learning differentially
private recurrent language models") through Flower's own pieces: its server-side clipping
wrappers clip each reply's step and add the Gaussian noise, its RDP accountant counts the
epsilon spent (`ClientLevelDP`). flwr + numpy only; the accountant needs `flwr[dp]`.

Why the wrappers are fed rather than wrapped around the strategy: Flower's
`DifferentialPrivacyServerSide*Clipping` clip every ArrayRecord of a reply against the arrays
sent, key for key, before the inner strategy sees it. A reply here is checked first (shapes,
dtypes, finite values: `contract`), may hold only the keys its method shares (FedPer's head
stays home), and may carry a second ArrayRecord of statistics (`wire.EXTRAS`); clipped as it
comes, a malformed reply would raise in the server and a partial one would be clipped against
the wrong arrays. So the strategy admits the replies, and this module hands the wrapper one
well-formed step per sampled node: the node's shared float arrays, or the arrays sent (a zero
step) where its reply was dropped or never came. Every sampled node then weighs 1/m of the
step, whatever it claims, which is what the sensitivity C/m needs.

Which arrays a round releases is fixed before round 1 (`shared`: the arrays the method's
clients send), never read from the replies: a round in which every reply failed still
releases the noise alone and counts. Skipping it would leave the model unchanged exactly
when no client trained, an event that depends on the clients' data and that no noise covers.

The accountant (Flower's `RdpAccountant`) counts each round as one Gaussian release of
sensitivity C with the multiplier z, without amplification by sampling (Flower's accounting
model for its fixed-clipping wrappers): a run's epsilon holds whichever clients were sampled.
Adaptive clipping (Andrew et al. 2021) splits z between the step and the count of unclipped
steps, so that the pair is accounted as one release at z (their Theorem 1).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, SamplingMethod
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

ACCOUNTING = "Flower's RdpAccountant (dp-accounting), no amplification by sampling, add or "
ACCOUNTING += "remove one client: each round one Gaussian release of sensitivity C"
ONE = "dp-weight"  # the wrapper's FedAvg weighs every sampled node by this metric, always 1
MAX_NOISE = 1e4  # beyond it the step is noise: a target epsilon that needs more is refused


@dataclass(frozen=True)
class Spent:
    """What a run has spent so far: epsilon at delta after `releases` noisy rounds."""

    epsilon: float
    delta: float
    releases: int


class ClientLevelDP:
    """Each round: every sampled node's step clipped to C (L2 over all its shared arrays), the
    mean over the m sampled nodes, Gaussian noise of std z C / m on every shared float array,
    and the release counted by the accountant.

    Parameters
    ----------
    noise_multiplier : z (`noise_for_epsilon` turns a target epsilon into it).
    clipping_norm : C; with `quantile` > 0 the adaptive clip's initial norm.
    delta : the delta at which epsilon is reported.
    population : the clients that may be sampled (the accountant's population).
    sample_size : m, the nodes sampled each round (adaptive clipping's count noise).
    quantile : 0: fixed clipping; gamma in (0, 1): C moves toward the gamma-quantile of the
        steps' norms (`adapt`, Andrew et al. 2021).
    shared : the keys of the arrays the clients send (the method's `sends`), released each
        round; None: every float array sent.
    """

    def __init__(
        self,
        noise_multiplier: float,
        clipping_norm: float,
        delta: float,
        population: int,
        sample_size: int,
        quantile: float = 0.0,
        shared: Collection[str] | None = None,
    ) -> None:
        if noise_multiplier <= 0 or clipping_norm <= 0:
            raise ValueError("DP needs a noise multiplier and a clipping norm above 0")
        self.noise_multiplier, self.delta, self.population = noise_multiplier, delta, population
        self.quantile = quantile
        self.shared = None if shared is None else frozenset(shared)
        self.norms: dict[int, float] = {}  # node -> its step's length, in the last round
        self.accountant = accountant(delta, population)
        # Adaptive clipping spends part of z on the count of unclipped steps (std sigma_b:
        # Andrew et al.'s m / 20, or z where that is too little to split); the step's noise
        # grows to (z^-2 - (2 sigma_b)^-2)^(-1/2), at most 1.16 z, so that the pair is one
        # release at z. Flower 1.42's adaptive wrappers are not used: they count the clipped
        # steps but move C as if counting the unclipped ones, so C runs away from the
        # quantile (docs/upstream/adaptive-clipping.md); the fixed wrapper clips at our C.
        self.count_std = max(sample_size / 20, noise_multiplier) if quantile else 0.0
        step_noise = noise_multiplier
        if quantile:
            step_noise = (noise_multiplier**-2 - (2 * self.count_std) ** -2) ** -0.5
        inner = FedAvg(weighted_by_key=ONE)
        self.wrapper = DifferentialPrivacyServerSideFixedClipping(
            inner, step_noise, clipping_norm, sample_size
        )

    @property
    def adaptive(self) -> bool:
        """C moves each round (`quantile` > 0)."""
        return self.quantile > 0

    @property
    def clipping_norm(self) -> float:
        """C of the next round (adaptive clipping moves it)."""
        return float(self.wrapper.clipping_norm)

    def step(
        self,
        sampled: list[int],
        steps: Mapping[int, Mapping[str, np.ndarray]],
        sent: Mapping[str, np.ndarray],
    ) -> dict[str, np.ndarray] | None:
        """The private mean of the shared float arrays (`shared`): `steps` (node -> the arrays
        it sent, checked) for the `sampled` nodes, the arrays `sent` for a node without one,
        so with no step at all the noise alone; the other arrays keep `sent`'s value. None
        where nothing is released (no sampled node, no shared array)."""
        keys = [k for k in sent if np.issubdtype(sent[k].dtype, np.floating)]
        keys = [k for k in keys if self.shared is None or k in self.shared]
        if not keys or not sampled:
            return None
        base = {k: np.asarray(sent[k]) for k in keys}
        # Flower's clip divides by the step's norm: a zero step (a reply dropped, none sent)
        # goes in as k < m messages, the noise set for k, and the step scaled by k / m, which
        # is the mean over the m sampled nodes with noise of std z C / m, as for m messages.
        moved = {n: {**base, **steps[n]} for n in sampled if n in steps}
        norms = {n: norm(a, base) for n, a in moved.items()}
        moved = {n: a for n, a in moved.items() if norms[n] > 0}
        if moved:
            messages = [self._message(node, arrays, keys) for node, arrays in moved.items()]
            self.wrapper.current_arrays = ArrayRecord({k: Array(base[k]) for k in keys})
            self.wrapper.num_sampled_clients = len(messages)
            with quiet():  # the wrapper logs a line per reply: 30 a round at the paper's q
                arrays, _ = self.wrapper.aggregate_train(0, messages)
            if arrays is None:
                return None
            share = len(messages) / len(sampled)
            mean = {k: base[k] + share * (arrays[k].numpy() - base[k]) for k in keys}
        else:  # no step to clip: the release is the noise alone
            std = self.wrapper.noise_multiplier * self.clipping_norm / len(sampled)
            mean = {k: base[k] + np.random.normal(0, std, base[k].shape) for k in keys}
        self.norms = norms  # each node's step length, for the round's record
        if self.adaptive:
            self.adapt(sum(norms.get(n, 0.0) <= self.clipping_norm for n in sampled), len(sampled))
        event = GaussianPrivacyEvent(self.noise_multiplier, len(sampled), self.population)
        self.accountant.compose(event)
        return {k: np.asarray(mean[k], dtype=base[k].dtype) for k in keys}

    def adapt(self, unclipped: int, sampled: int, rate: float = 0.2) -> None:
        """Andrew et al. (2021), Alg. 1: C <- C exp(-rate (b - gamma)), b the noisy share of
        steps no longer than C: all clipped (b = 0) raises C, none clipped lowers it, until
        a share gamma of the steps fits under C."""
        b = (unclipped + np.random.normal(0, self.count_std)) / sampled
        self.wrapper.clipping_norm = self.clipping_norm * math.exp(-rate * (b - self.quantile))

    @staticmethod
    def _message(node: int, arrays: Mapping[str, np.ndarray], keys: list[str]) -> Message:
        record = ArrayRecord({k: Array(np.asarray(arrays[k])) for k in keys})
        content = RecordDict({"arrays": record, "metrics": MetricRecord({ONE: 1})})
        return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node)

    def spent(self) -> Spent:
        """The epsilon spent so far at `delta`."""
        if not self.accountant.num_releases:
            return Spent(0.0, self.delta, 0)
        spent = self.accountant.get_privacy_spent()
        return Spent(float(spent.epsilon), float(spent.delta), int(spent.num_releases))

    def record(self, outside: str) -> dict[str, Any]:
        """What a run's summary says of its privacy: epsilon spent, how it was counted, and
        what the strategy's clients send outside it (`outside`)."""
        spent = self.spent()
        return {
            "epsilon": spent.epsilon,
            "delta": spent.delta,
            "releases": spent.releases,
            "noise-multiplier": self.noise_multiplier,
            "clipping-norm": self.clipping_norm,
            "clipping": "adaptive" if self.adaptive else "fixed",
            "accountant": ACCOUNTING,
            "outside": outside,
        }

    def state(self) -> dict[str, Any]:
        """What a resumed run needs: the accountant's releases, the adaptive clip's norm."""
        return {"accountant": self.accountant.state_dict(), "clipping-norm": self.clipping_norm}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.accountant.load_state_dict(dict(state["accountant"]))
        self.wrapper.clipping_norm = float(state["clipping-norm"])


def norm(arrays: Mapping[str, np.ndarray], base: Mapping[str, np.ndarray]) -> float:
    """The L2 norm of the step from `base`, over all its arrays."""
    return math.sqrt(sum(float(np.sum((arrays[k] - base[k]) ** 2.0)) for k in base))


@contextmanager
def quiet(enabled: bool = True, level: int = logging.WARNING) -> Iterator[None]:
    """Flower's log lines below `level` held back (by default its INFO lines)."""
    logger = logging.getLogger("flwr")
    before = logger.level
    if enabled:
        logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def accountant(delta: float, population: int) -> Any:
    """Flower's RDP accountant in the model of its fixed-clipping wrappers (`ACCOUNTING`)."""
    from flwr.serverapp import RdpAccountant  # imports dp-accounting: `flwr[dp]`

    config = PrivacyConfig(
        target_delta=delta,
        population_size=population,
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        sampling_method=SamplingMethod.NO_AMPLIFICATION,
    )
    return RdpAccountant(config)


def epsilon_after(noise_multiplier: float, rounds: int, delta: float) -> float:
    """Epsilon at `delta` after `rounds` releases at `noise_multiplier` (population 1 and
    sample 1: without amplification neither counts)."""
    spent = accountant(delta, 1)
    spent.compose(GaussianPrivacyEvent(noise_multiplier, 1, 1), rounds)
    return float(spent.get_epsilon(delta))


def noise_for_epsilon(epsilon: float, rounds: int, delta: float) -> float:
    """The smallest noise multiplier (to 0.1 %) whose `rounds` releases spend at most
    `epsilon` at `delta`; ValueError where that needs more than `MAX_NOISE`."""
    if epsilon_after(MAX_NOISE, rounds, delta) > epsilon:
        raise ValueError(
            f"epsilon {epsilon:g} over {rounds} rounds needs a noise multiplier above "
            f"{MAX_NOISE:g}: raise dp-epsilon or lower num-server-rounds"
        )
    low, high = 1e-3, MAX_NOISE
    while high / low > 1.001:
        middle = math.sqrt(low * high)
        if epsilon_after(middle, rounds, delta) > epsilon:
            low = middle
        else:
            high = middle
    return high
