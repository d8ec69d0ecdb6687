"""Process settings of the training loop: what they change (speed), what they must not (numbers)."""

import json
import subprocess
import sys
import textwrap

import pytest

from pfedgm_app.learning.training import keep_freed_memory

# Epochs of the CIFAR CNN in a fresh process (mallopt is process-wide and one-way): a checksum
# of the trained weights.
TRAIN = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch import nn
    from pfedgm_app.learning.models import build_model
    from pfedgm_app.learning.training import (
        keep_freed_memory, make_sgd, run_epochs, supervised_step)
    kept = keep_freed_memory() if sys.argv[1] == "keep" else False
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(500, 3, 32, 32), torch.randint(0, 10, (500,))
    model = build_model((3, 32, 32), lambda dim: nn.Linear(dim, 10))
    opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
    run_epochs(supervised_step(model), x, y, opt, 1, rng=torch.Generator().manual_seed(1))
    run_epochs(supervised_step(model), x, y, opt, 2, rng=torch.Generator().manual_seed(2))
    weights = [p.detach().double().sum().item() for p in model.parameters()]
    print(json.dumps({"kept": kept, "weights": weights}))
    """
)


def _train(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", TRAIN, mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # epochs of the CIFAR CNN, twice
@pytest.mark.skipif(not keep_freed_memory(), reason="the C library has no mallopt (not glibc)")
def test_keeping_freed_memory_changes_no_number():
    """The allocator setting moves tensors, not numbers: the trained weights are equal bit for
    bit. Its effect on page faults and speed is a figure, printed by
    benchmarks/bench_allocator.py."""
    default, kept = _train("default"), _train("keep")
    assert kept["kept"] and not default["kept"]
    assert kept["weights"] == default["weights"]


def test_make_sgd_steps_equal_torchs_default_sgd_bit_for_bit():
    """The fused kernel `make_sgd` picks computes the default SGD's arithmetic (decay, momentum
    from its first step, two groups as pFedGM's phase 1 has) and no other."""
    import copy

    import torch
    from torch import nn

    from pfedgm_app.learning.models import build_model
    from pfedgm_app.learning.training import make_sgd, run_epochs, supervised_step

    torch.manual_seed(0)
    x, y = torch.randn(120, 3, 32, 32), torch.randint(0, 10, (120,))
    fused = build_model((3, 32, 32), lambda dim: nn.Linear(dim, 10))
    plain, start = copy.deepcopy(fused), copy.deepcopy(fused)

    def groups(model: nn.Module) -> list[dict]:
        return [{"params": list(model.generator.parameters())},
                {"params": list(model.head.parameters()), "weight_decay": 0.0}]  # fmt: skip

    optimizers = [
        make_sgd(groups(fused), 0.01, 0.5, 5e-4),
        torch.optim.SGD(groups(plain), lr=0.01, momentum=0.5, weight_decay=5e-4),
    ]
    assert optimizers[0].defaults["fused"] and not optimizers[1].defaults["fused"]
    for model, opt in zip((fused, plain), optimizers, strict=True):
        run_epochs(supervised_step(model), x, y, opt, 3, rng=torch.Generator().manual_seed(1))
    for a, b, s in zip(fused.parameters(), plain.parameters(), start.parameters(), strict=True):
        assert not torch.equal(a, s)  # every weight moved
        assert torch.equal(a, b)
