"""The method registry: every method is declared once, here, as a `Method` (its `method` key,
the paper's name, client plug-in, server strategy, its own hyperparameters, a summary), in the
paper's table order. The registry is torch-free: a plug-in (torch) and a strategy (flwr) are
imported when first used, so `pfedgm check` parses a run-config without them.

Run-config parsing, the strategy the ServerApp builds, the `pyproject.toml` keys (checked by a
test), the rows of the paper's tables (`pfedgm_paper.grid`), the method table of
docs/methods.md (`markdown_table`, written by `python -m devtools.reference`) and the keys of
docs/run-config.md all come from `METHODS`. A plug-in's code is in its module (`base`: FedAvg's,
which the others override), its `Settings` in `runconfig.method_settings`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pfedgm_app.runconfig import method_settings
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import (
    DittoSettings,
    FedPACSettings,
    FedRepSettings,
    FineTune,
    LGFedAvgSettings,
    PFedFDASettings,
    PFedGMSettings,
    PFedMeSettings,
)
from pfedgm_app.runconfig.settings import ConfigError, Settings

from .method import Method

REGISTERED = (
    Method(
        "local",
        "Local",
        "fedavg:LocalClient",
        "no communication: each client trains its own model `local-epochs` whenever sampled",
    ),
    Method(
        "fedavg",
        "FedAvg",
        "fedavg:FedAvgClient",
        "FedAvg (McMahan et al., 2017): the global model evaluated on each client's test split",
    ),
    Method(
        "fedavgft",
        "FedAvgFT",
        "fedavg:FedAvgFTClient",
        "FedAvg, then `finetune-epochs` local epochs of the whole model on each client",
        settings=FineTune,
    ),
    Method(
        "ditto",
        "Ditto",
        "ditto:DittoClient",
        "Ditto (Li et al., ICML 2021): FedAvg global model + a personal model trained with the "
        "proximal term mu/2 ‖v − w‖², mu = `ditto-mu`; evaluated with the personal model",
        settings=DittoSettings,
    ),
    Method(
        "fedbabu",
        "FedBABU",
        "split:FedBABUClient",
        "FedBABU (Oh et al., ICLR 2022): generator trained with the randomly initialized head "
        "fixed; the whole model fine-tuned `finetune-epochs` per client at the end",
        settings=FineTune,
    ),
    Method(
        "fedpac",
        "FedPAC",
        "fedpac:FedPACClient",
        "FedPAC (Xu et al., ICLR 2023): `fedpac-head-epochs` head epochs at "
        "`fedpac-head-learning-rate`, then `local-epochs` generator epochs on CE + "
        "`fedpac-lambda` × MSE to the global class prototypes; the server combines the "
        "participants' heads per client from their feature statistics (a simplex QP); the head "
        "never joins the average",
        strategy="FedPAC",
        settings=FedPACSettings,
    ),
    Method(
        "fedrep",
        "FedRep",
        "split:FedRepClient",
        "FedRep (Collins et al., ICML 2021): per round, `fedrep-head-epochs` head epochs with "
        "the generator fixed, then `local-epochs` generator epochs with the head fixed; only "
        "the generator is sent; at the end each head refit `fedrep-refit-epochs` on the final "
        "generator",
        settings=FedRepSettings,
    ),
    Method(
        "lgfedavg",
        "LG-FedAvg",
        "split:LGFedAvgClient",
        "LG-FedAvg (Liang et al., 2020): after `lgfedavg-warmup-fraction` of the rounds as "
        "FedAvg, global convolution layers, local fully connected layers (never sent)",
        settings=LGFedAvgSettings,
    ),
    Method(
        "fedper",
        "FedPer",
        "split:FedPerClient",
        "FedPer (Arivazhagan et al., 2019): global generator, local head (never sent)",
    ),
    Method(
        "pfedme",
        "pFedMe",
        "pfedme:PFedMeClient",
        "pFedMe (Dinh et al., NeurIPS 2020): per batch, the Moreau-envelope inner problem on "
        "the personal model theta (`pfedme-inner-steps` steps at "
        "`pfedme-personal-learning-rate`, stopping at `pfedme-tolerance`), then w ← w − "
        "lr·`pfedme-lambda`·(w − theta); theta stays on the client and is what is evaluated "
        "(w_i too, as the authors' code does)",
        settings=PFedMeSettings,
    ),
    Method(
        "pfedfda",
        "pFedFDA",
        "pfedfda:PFedFDAClient",
        "pFedFDA (McLaughlin et al., NeurIPS 2024): generator trained under a fixed LDA head "
        "built from the global class means and shared covariance; local statistics interpolated "
        "with the global ones, one coefficient for the means and one for the covariance, each "
        "in [0, 1], chosen by cross-validation over `pfedfda-cv-folds` folds with L-BFGS",
        strategy="PFedFDA",
        settings=PFedFDASettings,
    ),
    Method(
        "pfedgm",
        "pFedGM",
        "pfedgm:PFedGMClient",
        "pFedGM (this paper): Phase 1 as Algorithm 1, Phase 2 personalized head + L-BFGS biases",
        strategy="PFedGM",
        settings=PFedGMSettings,
    ),
)
METHODS: dict[str, Method] = {m.name: m for m in REGISTERED}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; choose one of {list(METHODS)}") from None


def _settings() -> dict[str, type[Settings]]:
    """Each registered method's settings group, by name (what `method_settings` parses with)."""
    return {name: method.settings for name, method in METHODS.items()}


def settings_groups() -> list[type[Settings]]:
    """Every group of run-config keys: the common ones, then each method's (once each)."""
    return method_settings.settings_groups(_settings())


def run_config_keys() -> dict[str, Any]:
    """{key: default} of every run-config key (what `pyproject.toml` must declare)."""
    return method_settings.run_config_keys(_settings())


def parse_run_config(run_config: Mapping[str, Any]) -> tuple[RunConfig, Method, Settings]:
    """Flower's run-config -> (common settings, the chosen method, its settings), as
    `method_settings.parse` checks it: one ConfigError naming the key and how to fix it,
    before any data is loaded or any round runs."""
    cfg, settings = method_settings.parse(run_config, _settings())
    noise_multiplier(cfg)  # a target epsilon the rounds cannot reach: refused here
    method = METHODS[cfg.method]
    if cfg.private and not method.sends:
        raise ConfigError(f"method={cfg.method!r} sends nothing, so DP has nothing to release: "
                          "remove dp-epsilon / dp-noise (the run releases nothing)")  # fmt: skip
    return cfg, method, settings


def noise_multiplier(cfg: RunConfig) -> float:
    """z of a DP run: `dp-noise`, or the smallest that spends at most `dp-epsilon` over the
    run's rounds (ConfigError where none does); 0 without DP."""
    if not cfg.dp_epsilon:
        return cfg.dp_noise
    from pfedgm_app.strategies.privacy import noise_for_epsilon  # flwr's accountant

    try:
        return noise_for_epsilon(cfg.dp_epsilon, max(cfg.num_server_rounds, 1), cfg.dp_delta)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def markdown_table() -> str:
    """The method table of docs/methods.md (`python -m devtools.reference` writes it); each
    run-config key a summary names gets its default from the registry."""
    rows = [
        f"| `{m.name}` | {', '.join(m.sends) or 'nothing'} | `{m.strategy_class().__name__}` | "
        f"{with_defaults(m.summary)} |"
        for m in METHODS.values()
    ]
    header = "| `method` | sends | strategy | what it does |\n|---|---|---|---|"
    return "\n".join([header, *rows])


def with_defaults(text: str) -> str:
    """`text` with each backquoted run-config key followed by its default: "`ditto-mu`" ->
    "`ditto-mu` (1.0)"."""
    defaults = run_config_keys()

    def default(match: re.Match) -> str:
        key = match.group(1)
        return f"`{key}` ({defaults[key]})" if key in defaults else match.group(0)

    return re.sub(r"`([\w-]+)`", default, text)


__all__ = [
    "METHODS",
    "Method",
    "get_method",
    "markdown_table",
    "parse_run_config",
    "run_config_keys",
    "settings_groups",
]
