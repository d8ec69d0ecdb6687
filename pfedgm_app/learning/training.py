"""The one local training loop every method uses, plus device, threads and evaluation helpers.

Data are in-memory tensors (decoded once by `pfedgm_app.data`); batches are index slices of a seeded
permutation, so there is no DataLoader, no worker process and no per-batch decoding.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pick_device(name: str = "auto") -> torch.device:
    """'auto' takes CUDA when present, else the CPU; 'cpu' / 'cuda[:N]' as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={name!r} but CUDA is not available here; use 'auto' or 'cpu'")
    return torch.device(name)


def set_threads(requested: int = 0) -> int:
    """Give this process its share of the cores: `requested`, else the CPUs Ray assigned to this
    actor (simulation), else OMP_NUM_THREADS, else all cores. Two processes that each use all
    cores oversubscribe them: each waits on the other's threads, and both run many times slower.
    """
    n = requested or _ray_cpus() or int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count()
    n = max(1, int(n or 1))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _ray_cpus() -> int:
    if "ray" not in sys.modules:  # not inside a Ray worker: do not start one
        return 0
    import ray

    if not ray.is_initialized():
        return 0
    return int(ray.get_runtime_context().get_assigned_resources().get("CPU", 0))


@functools.cache
def keep_freed_memory() -> bool:
    """Let this process reuse the memory it frees instead of handing it back to the OS.

    A training step frees and re-allocates the same few MiB of activations and gradients every
    batch. glibc's malloc by default serves such blocks by fresh `mmap`s or trims them off the
    heap when freed, so each batch touches new pages: page faults, how many depending on the
    CPU's kernels (`benchmarks/README.md`). Fixing the mmap threshold at 32 MiB (glibc's own
    ceiling for it) and the trim threshold at 256 MiB keeps those blocks in the heap; the
    process's memory stays at its peak. Numbers are unchanged: only where tensors live. Once
    per process (`mallopt` is process-wide); False where the C library has no `mallopt` (not
    glibc), which changes nothing but speed.
    """
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name) if libc_name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(
        libc.mallopt(m_trim_threshold, 256 << 20)
    )


def make_sgd(params, lr: float, momentum: float, weight_decay: float) -> torch.optim.SGD:
    """SGD as in the paper (lr 0.01, momentum 0.5, weight decay 5e-4 by default).

    torch's fused kernel: one pass over each parameter for decay, momentum and update, with
    the same arithmetic as the default (`tests/test_training.py` checks the weights are
    bitwise equal), without the default's separate passes, so with less overhead per step.
    """
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=True)


def run_epochs(
    step: Step,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: torch.optim.Optimizer | None,
    epochs: int,
    batch_size: int = 50,
    rng: torch.Generator | None = None,
    after_step: Callable[[], None] | None = None,
) -> dict[str, float]:
    """`epochs` passes of mini-batch optimization of `step(xb, yb) -> loss` over (x, y).

    Batches follow a permutation drawn from `rng` per epoch. Returns the mean loss and the
    number of sample-passes. `after_step` runs after each optimizer step (projections, running
    statistics). With `optimizer=None` the step updates
    the weights itself (pFedMe's bi-level step) and its returned loss is only recorded.
    """

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(len(x), generator=rng).to(x.device)
        for start in range(0, len(x), batch_size):
            idx = order[start : start + batch_size]
            yield x[idx], y[idx]

    return run_batches(step, batches, optimizer, epochs, after_step)


def run_batches(
    step: Step,
    batches: Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]],
    optimizer: torch.optim.Optimizer | None,
    epochs: int,
    after_step: Callable[[], None] | None = None,
    device: torch.device | None = None,
) -> dict[str, float]:
    """The loop of `run_epochs` over any batches: `batches()` gives one epoch's (x, y) pairs
    (e.g. a DataLoader), moved to `device` if given."""
    total: float | torch.Tensor = 0.0  # a tensor after the first batch
    passes = 0
    for _ in range(epochs):
        for xb, yb in batches():
            if device is not None:
                xb, yb = xb.to(device), yb.to(device)
            if optimizer is None:
                loss = step(xb, yb)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss = step(xb, yb)
                loss.backward()
                optimizer.step()
            if after_step is not None:
                after_step()
            total = total + loss.detach() * len(yb)  # no device-to-host sync per batch
            passes += len(yb)
    return {"loss": float(total) / max(passes, 1), "sample-passes": float(passes)}


def supervised_step(model: nn.Module) -> Step:
    """Cross-entropy on the model's logits: the step of FedAvg, FedAvgFT and Local."""
    return lambda xb, yb: nn.functional.cross_entropy(model(xb), yb)


@torch.no_grad()
def apply_batched(fn: Callable, x: torch.Tensor, batch_size: int = 100) -> torch.Tensor:
    """fn over x in chunks (inference only; ~100 keeps a CPU core's caches warm). A module runs
    in eval mode (no dropout) and gets its mode back after."""
    with evaluating(fn if isinstance(fn, nn.Module) else None):
        return torch.cat([fn(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


@contextmanager
def evaluating(module: nn.Module | None) -> Iterator[None]:
    """`module` in eval mode inside the block; every submodule gets its own mode back after
    (None: nothing to do)."""
    modes = [] if module is None else [(m, m.training) for m in module.modules()]
    if module is not None:
        module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


@torch.no_grad()
def accuracy(fn: Callable, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of samples whose argmax of fn(x) equals y."""
    if len(x) == 0:
        return float("nan")
    return (apply_batched(fn, x).argmax(1) == y).float().mean().item()


@contextmanager
def frozen(*modules: nn.Module) -> Iterator[None]:
    """Hold `modules` fixed: no gradients are computed for them inside the block."""
    params = [p for m in modules for p in m.parameters()]
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(params, flags, strict=True):
            p.requires_grad_(flag)
