"""A device's personalized model on its own disk: what the personalize round evaluated, saved
by the ClientApp (`save`) and read back without pickle (`load`, as `predict` does). It never
leaves the device: the personalize reply carries metrics only.

A model file is safetensors: every parameter and buffer of the evaluated `Model` (the generator
for its image shape, then a head of one of the `HEADS` kinds) and three metadata strings:

    format   FORMAT
    model    JSON: image-shape [C, H, W], classes (the names, in the model's order), head (its
             kind), head-args, backbone (the generator's class), normalization; and the run's
             method, run-id, rounds (of Phase 1; `server-round` in older files), initial-model,
             dataset, partition-id, accuracy (on the client's test split), num-test
    sha256   of the tensors (names, dtypes, shapes, bytes) and of `model` (`digest`)
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
from torch import nn

from pfedgm_app.learning.adaptation import PersonalizedHead
from pfedgm_app.learning.models import GENERATORS, Model, build_generator
from pfedgm_app.methods.pfedfda import LDAHead

FORMAT = "pfedgm-personal-model/1"
"""The `format` metadata string of a model file: `load` refuses a file without it."""
SUFFIX = ".safetensors"
"""A model file's suffix: a device's is `<model-dir>/client-<partition id>.safetensors`."""
NORMALIZATION = "pixels / 255, then (x - 0.5) / 0.5 per channel"
"""What `data.to_tensor` did to the model's images, and an image needs before it classifies."""

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
        lambda t, a: PersonalizedHead(  # objective-scale: "mean" in files written before it
            *(t["mu_star"], t["b_star"], t["A_star"], t["upsilon"]),
            a["lambda"],
            a.get("objective-scale", "mean"),
        ),
        lambda head: {"lambda": head.lambda_, "objective-scale": head.objective_scale},
    ),
    # pFedFDA's LDA classifier from the adapted statistics and the client's priors
    "lda": Head(LDAHead, lambda t, a: LDAHead(*t["mu"].shape)),
}
"""The head kinds a model file can hold (`head`); a method's other head is declared here."""


class ModelFileError(ValueError):
    """A file `load` cannot use; the message is one line naming the file and what is wrong."""


@dataclass
class PersonalModel:
    """A loaded model file (`load`): `model`, the rebuilt module in eval mode, on the CPU, which
    maps images (N, C, H, W), normalized as `NORMALIZATION` says, to one logit per class; `meta`,
    the file's `model` metadata (the keys of the module's docstring: `accuracy`, `method`, ...)."""

    model: Model
    meta: dict[str, Any]

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of the images the model takes (`predict` refuses other sizes)."""
        return tuple(self.meta["image-shape"])

    @property
    def classes(self) -> list[str]:
        """The class names, in the order of the model's logits."""
        return self.meta["classes"]


def head_kind(head: nn.Module) -> str:
    """The `HEADS` kind of `head` (by its exact class)."""
    if kind := next((k for k, declared in HEADS.items() if type(head) is declared.cls), None):
        return kind
    raise TypeError(f"no head kind for {type(head).__name__}: declare it in personal_model.HEADS")


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
    """Write `model` (a `Model` whose head is of a `HEADS` kind) to `path` (its folder made)
    with `image_shape` (C, H, W), `classes` (one name per logit, else ValueError) and `run`
    (method, run-id, accuracy, ...) as metadata, and the `digest` that `load` checks;
    atomically (a `.tmp` file renamed: a kill leaves the previous file whole); returns `path`."""
    kind = head_kind(model.head)
    with torch.no_grad():
        z = torch.zeros(1, model.generator.dim, device=next(model.parameters()).device)
        outputs = model.head(z).shape[-1]
    if outputs != len(classes):
        raise ValueError(f"the model gives {outputs} logits for {len(classes)} class names")
    meta = {
        **run,
        "image-shape": list(image_shape),
        "classes": list(classes),
        "head": kind,
        "head-args": HEADS[kind].args(model.head),
        "backbone": type(model.generator).__name__,
        "normalization": NORMALIZATION,
    }
    text = json.dumps(meta, sort_keys=True)
    tensors = tensors_of(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    from safetensors.torch import save_file  # where used: a ClientApp's import stays lean

    save_file(tensors, tmp, {"format": FORMAT, "model": text, "sha256": digest(tensors, text)})
    os.replace(tmp, path)
    return path


def load(path: Path | str) -> PersonalModel:
    """The model saved at `path` (by `save`), rebuilt on the CPU and checked, without pickle.
    `ModelFileError`, one line naming the file and what is wrong: a missing file, not
    safetensors, not such a model (`FORMAT`), tensors or metadata that no longer match the
    SHA-256 (damage, or an edit: a check of integrity, not a signature), and, the SHA-256
    recomputed or not, fields that do not fit the tensors (`checked_meta`, `rebuild`)."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    from safetensors import SafetensorError, safe_open  # where used (a lean import)

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
    meta = checked_meta(header["model"], path)
    return PersonalModel(rebuild(meta, tensors, path), meta)


# The metadata `rebuild` and `predict` use, and the JSON type of each.
_FIELDS = {"image-shape": list, "classes": list, "head": str, "head-args": dict, "backbone": str}
_JSON_TYPES = {list: "array", str: "string", dict: "object"}
_REBUILD = "use the file the client saved, or save it again"


def checked_meta(text: str, path: Path | str = "model") -> dict[str, Any]:
    """The `model` metadata `text`, its fields checked: image-shape, classes, head, head-args
    and backbone present and of their JSON types, the image shape one of `GENERATORS`, the
    class names strings, the head a `HEADS` kind (`ModelFileError` says what is not)."""
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python goes
        meta = None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path}: its model metadata is not a JSON object; {_REBUILD}")
    meta = {"rounds" if k == "server-round" else k: v for k, v in meta.items()}  # older files
    for key, kind in _FIELDS.items():
        if type(meta.get(key)) is not kind:
            found = f"has no {key}" if key not in meta else f"'s {key} is {_short(meta[key])}"
            raise ModelFileError(
                f"{path}: its metadata{found}, not a JSON {_JSON_TYPES[kind]}; {_REBUILD}"
            )
    shape = meta["image-shape"]
    if not all(type(n) is int for n in shape) or tuple(shape) not in GENERATORS:
        known = [list(s) for s in GENERATORS]
        raise ModelFileError(
            f"{path}: its image-shape {_short(shape)} is none this version has a "
            f"generator for ({known}); {_REBUILD}"
        )
    classes = meta["classes"]
    if not classes or not all(type(name) is str for name in classes):
        raise ModelFileError(
            f"{path}: its classes {_short(classes)} are not class names; {_REBUILD}"
        )
    if meta["head"] not in HEADS:
        raise ModelFileError(
            f"{path}: head kind {_short(meta['head'])} is unknown here (known: {list(HEADS)})"
        )
    return meta


def rebuild(meta: dict[str, Any], tensors: Tensors, path: Path | str = "model") -> Model:
    """The `Model` of checked metadata (`checked_meta`), its tensors copied in: every name,
    dtype and shape must match, and it must give one logit per class name."""
    kind, classes = meta["head"], meta["classes"]
    generator = build_generator(tuple(meta["image-shape"]))
    if type(generator).__name__ != meta["backbone"]:
        raise ModelFileError(
            f"{path}: its generator {_short(meta['backbone'])} is not this "
            f"version's ({type(generator).__name__})"
        )
    if odd := [n for n, t in tensors.items() if t.dtype != torch.float32][:1]:
        raise ModelFileError(f"{path}: {odd[0]} is {tensors[odd[0]].dtype}, not float32")
    if odd := [n for n, t in tensors.items() if not t.isfinite().all()][:1]:  # nan predictions
        raise ModelFileError(f"{path}: {odd[0]} holds NaN or Inf: use a model that trained well")
    head_tensors = {k[len("head.") :]: v for k, v in tensors.items() if k.startswith("head.")}
    # A head is sized by its classes and the generator's features only: checked before the head
    # is built, as building allocates from these sizes (an LDA head a d x d covariance).
    sizes = {len(classes), generator.dim}
    for name, t in head_tensors.items():
        if not set(t.shape) <= sizes:
            raise ModelFileError(
                f"{path}: head.{name} has shape {tuple(t.shape)}, but the file names "
                f"{len(classes)} classes and its generator gives {generator.dim} features; "
                f"{_REBUILD}"
            )
    try:
        head = HEADS[kind].build(head_tensors, meta["head-args"])
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise ModelFileError(
            f"{path}: its tensors and head-args are not a {kind} head's "
            f"({_one_line(exc)}); {_REBUILD}"
        ) from None
    model = Model(generator, head)
    own = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    if set(own) != set(tensors):
        odd = sorted(set(own) ^ set(tensors))[:3]
        raise ModelFileError(f"{path}: its tensors are not a {kind} model's (e.g. {odd})")
    with torch.no_grad():
        for name, value in tensors.items():
            if own[name].shape != value.shape:
                raise ModelFileError(
                    f"{path}: {name} has shape {tuple(value.shape)}, the "
                    f"model's is {tuple(own[name].shape)}"
                )
            own[name].copy_(value)
        try:  # what `predict` does with it, on one blank image
            outputs = model.eval()(torch.zeros(1, *meta["image-shape"])).shape[-1]
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ModelFileError(
                f"{path}: the model cannot classify an image ({_one_line(exc)}); {_REBUILD}"
            ) from None
    if outputs != len(classes):
        raise ModelFileError(
            f"{path}: the model gives {outputs} logits for {len(classes)} class names; {_REBUILD}"
        )
    return model


def _short(value: Any) -> str:
    """`value` as JSON, cut to fit in a line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_line(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0]


def folder_problem(folder: Path) -> str | None:
    """Why model files cannot be written into `folder` (made when missing), or None."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder} cannot be written here ({existing} is not a writable folder)"
    return None
