"""A device's personalized model on its own disk: what the personalize round evaluated, saved
by the ClientApp (`save`) and read back without pickle (`load`; `python -m pfedgm_app.predict`
uses it). It never leaves the device: the personalize reply carries metrics only.

A model file is safetensors: every parameter and buffer of the evaluated `Model` (the backbone
for its image shape, then a head of one of the `HEADS` kinds) and three metadata strings:

    format   FORMAT
    model    JSON: image-shape [C, H, W], classes (the names, in the model's order), head (its
             kind), head-args, backbone, normalization; and the run's method, run-id,
             server-round (Phase 1 rounds behind it), initial-model, dataset, partition-id,
             accuracy (on the client's test split), num-test
    sha256   of the tensors (names, dtypes, shapes, bytes) and of `model` (`digest`)

`load` refuses, in one line, a file that is not safetensors, one that is not such a model, and
one whose tensors or metadata no longer match its SHA-256 (damaged, or edited without it being
recomputed: a check of integrity, not a signature).

A head kind is its class, the non-tensor arguments it is rebuilt with, and how to build one from
its tensors; a method whose evaluated model has another head declares that head's kind in
`HEADS`, and nothing else here changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from .gaussian import PersonalizedHead
from .methods.pfedfda import LDAHead
from .models import Model, build_generator

FORMAT = "pfedgm-personal-model/1"
SUFFIX = ".safetensors"
# What `data.to_tensor` does to the images the model was trained and evaluated on.
NORMALIZATION = "pixels / 255, then (x - 0.5) / 0.5 per channel"

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Head:
    """A kind of head: its class, how to build one from its tensors (names without `head.`)
    and arguments, and the non-tensor arguments a head of it is rebuilt with."""

    cls: type[nn.Module]
    build: Callable[[Tensors, dict[str, Any]], nn.Module]
    args: Callable[[nn.Module], dict[str, Any]] = field(default=lambda head: {})


HEADS: dict[str, Head] = {
    # the baselines' classifier (FedAvg, Ditto's personal model, FedRep's refit head, ...)
    "linear": Head(nn.Linear, lambda t, a: nn.Linear(t["weight"].shape[1], t["weight"].shape[0])),
    # pFedGM's Phase 2 head (Eq. LossC / ctest) on phi*
    "personalized-gaussian": Head(
        PersonalizedHead,
        lambda t, a: PersonalizedHead(
            t["mu_star"], t["b_star"], t["A_star"], t["upsilon"], a["lambda"]
        ),
        lambda head: {"lambda": head.lam},
    ),
    # pFedFDA's LDA classifier from the adapted statistics and the client's priors
    "lda": Head(LDAHead, lambda t, a: LDAHead(*t["mu"].shape)),
}


class ModelFileError(ValueError):
    """A file `load` cannot use; the message is one line naming the file and what is wrong."""


@dataclass
class PersonalModel:
    """A loaded model file: the module (eval mode; images normalized as `data.to_tensor` does
    -> logits) and its metadata."""

    model: Model
    meta: dict[str, Any]

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.meta["image-shape"])

    @property
    def classes(self) -> list[str]:
        return self.meta["classes"]


def head_kind(head: nn.Module) -> str:
    """The `HEADS` kind of `head` (by its exact class)."""
    for kind, declared in HEADS.items():
        if type(head) is declared.cls:
            return kind
    raise TypeError(
        f"no head kind for {type(head).__name__}: declare it in pfedgm_app.personal_model.HEADS"
    )


def tensors_of(model: nn.Module) -> Tensors:
    """Every parameter and buffer, persistent or not (an LDA head's classifier is a buffer the
    state_dict leaves out), on the CPU and contiguous."""
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return {k: v.detach().cpu().contiguous() for k, v in named.items()}


def digest(tensors: Tensors, model_meta: str) -> str:
    """SHA-256 of the `model` metadata string and of each tensor's name, dtype, shape and bytes,
    in name order."""
    h = hashlib.sha256(model_meta.encode())
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"\n{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save(
    path: Path, model: Model, image_shape: tuple[int, int, int], classes: list[str], run: dict
) -> Path:
    """Write `model` (a `Model` whose head is of a `HEADS` kind) to `path`, with its image
    shape, class names and `run` (method, run-id, accuracy, ...) as metadata; atomically, so
    a kill leaves the previous file whole."""
    kind = head_kind(model.head)
    with torch.no_grad():
        z = torch.zeros(1, model.generator.dim, device=next(model.parameters()).device)
        outputs = model.head(z).shape[-1]
    if outputs != len(classes):
        raise ValueError(f"the model gives {outputs} logits for {len(classes)} class names")
    meta = {**run, "image-shape": list(image_shape), "classes": list(classes), "head": kind,
            "head-args": HEADS[kind].args(model.head),
            "backbone": type(model.generator).__name__, "normalization": NORMALIZATION}  # fmt: skip
    text = json.dumps(meta, sort_keys=True)
    tensors = tensors_of(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, tmp, {"format": FORMAT, "model": text, "sha256": digest(tensors, text)})
    os.replace(tmp, path)
    return path


def load(path: Path | str) -> PersonalModel:
    """The model in `path`, rebuilt and checked (`ModelFileError` says what is wrong)."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    try:
        with safe_open(path, framework="pt") as f:
            header = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise ModelFileError(f"{path}: not a model file (not safetensors: {exc})") from None
    if header.get("format") != FORMAT or "model" not in header:
        found = header.get("format", "no format")
        raise ModelFileError(f"{path}: not a pFedGM personalized model ({found}, not {FORMAT})")
    if digest(tensors, header["model"]) != header.get("sha256"):
        raise ModelFileError(
            f"{path}: changed since it was written: its tensors or metadata do not match its "
            "SHA-256; use an unaltered copy"
        )
    meta = json.loads(header["model"])
    return PersonalModel(rebuild(meta, tensors, path), meta)


def rebuild(meta: dict[str, Any], tensors: Tensors, path: Path | str = "model") -> Model:
    """The `Model` of a file's metadata, its tensors copied in (every name must match)."""
    kind = meta["head"]
    if kind not in HEADS:
        raise ModelFileError(f"{path}: head kind {kind!r} is unknown here (known: {list(HEADS)})")
    generator = build_generator(tuple(meta["image-shape"]))
    if type(generator).__name__ != meta["backbone"]:
        raise ModelFileError(f"{path}: its backbone {meta['backbone']} is not this version's")
    head_tensors = {k[len("head.") :]: v for k, v in tensors.items() if k.startswith("head.")}
    model = Model(generator, HEADS[kind].build(head_tensors, meta["head-args"]))
    own = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    if set(own) != set(tensors):
        odd = sorted(set(own) ^ set(tensors))[:3]
        raise ModelFileError(f"{path}: its tensors are not a {kind} model's (e.g. {odd})")
    with torch.no_grad():
        for name, value in tensors.items():
            if own[name].shape != value.shape:
                raise ModelFileError(f"{path}: {name} has shape {tuple(value.shape)}, the "
                                     f"model's is {tuple(own[name].shape)}")  # fmt: skip
            own[name].copy_(value)
    return model.eval()


def folder_problem(folder: Path) -> str | None:
    """Why model files cannot be written into `folder` (made when missing), or None."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder} cannot be written here ({existing} is not a writable folder)"
    return None
