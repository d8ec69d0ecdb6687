"""A finished run's global model with its features z scaled by s, for a Phase 2 probe:

    python -m devtools.rescale_features RUN DEST --scale 5.4
    pfedgm-paper run standard --columns cifar10-dir05 --methods pfedgm --rounds 0 --offline \
        --set initial-model=DEST --out /abs/probe

The generator phi ends in fc -> LeakyReLU (`models.ConvGenerator`), both positively
homogeneous, so the fc's weight and bias times s > 0 give z times s on every image; the head
(pFedGM's psi and nu, another method's classifier) stays as it was. A run of the same method
from DEST with `num-server-rounds=0` is its personalize round alone on those features: what
a model's personalized accuracy owes to its features' scale, apart from what they separate
(docs/notes/dp-noise-cost.md). That holds for a method whose personalized model is made in
its personalize round from the global model (pFedGM: s = 1 gives the run's number back); not
for FedPAC, whose heads the server combines over its rounds (a run of no rounds has none).
DEST gets the scaled `global_model.safetensors` and RUN's `config.json`, what `initial-model`
reads.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import torch

from pfedgm_app.records.initial_model import load_state, save_state

MODEL, CONFIG = "global_model.safetensors", "config.json"
# the generator's layers, by index in its `features` Sequential; the last 2-D weight is the fc
_LAYER = re.compile(r"generator\.features\.(\d+)\.(weight|bias)")


def fc_names(state: dict[str, torch.Tensor]) -> tuple[str, str]:
    """The names of the generator's fc weight and bias (the last layer with a 2-D weight)."""
    fcs = [
        int(m[1])
        for k, v in state.items()
        if (m := _LAYER.fullmatch(k)) and m[2] == "weight" and v.dim() == 2
    ]
    if not fcs:
        raise ValueError("no generator.features.N fc in this model: is it a run's global model?")
    return f"generator.features.{max(fcs)}.weight", f"generator.features.{max(fcs)}.bias"


def rescale(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """`state` with the generator's fc times `scale` (> 0): z times `scale`."""
    if not scale > 0:
        raise ValueError(f"--scale must be > 0 (LeakyReLU is homogeneous for s > 0), got {scale}")
    names = fc_names(state)
    return {k: v * scale if k in names else v for k, v in state.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.rescale_features")
    parser.add_argument("run", type=Path, help="a finished run's folder (or a collected copy)")
    parser.add_argument("dest", type=Path, help="the folder for the scaled model")
    parser.add_argument("--scale", type=float, required=True, help="s > 0: z becomes s z")
    args = parser.parse_args(argv)
    for name in (MODEL, CONFIG):
        if not (args.run / name).is_file():
            sys.exit(f"{args.run / name} is missing: RUN must be a finished run's folder")
    try:
        state = rescale(load_state(args.run / MODEL), args.scale)
    except ValueError as e:
        sys.exit(str(e))
    args.dest.mkdir(parents=True, exist_ok=True)
    save_state(state, args.dest / MODEL)
    shutil.copy(args.run / CONFIG, args.dest / CONFIG)
    print(f"{args.dest / MODEL}: z times {args.scale:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
