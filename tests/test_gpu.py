"""The CUDA path: pFedGM's math on the GPU equals the CPU result within float tolerance, and
every method trains and personalizes with its data and state on the GPU. Skipped where there is
no CUDA device (CI); `benchmarks/gpu_check.sh` runs them on a GPU machine.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pfedgm_app.data import ClientData
from pfedgm_app.learning.gaussian import (
    GaussianHead,
    class_means,
    covariance_objective,
    personalized_objective,
    shared_objective,
    update_prototypes_,
)
from pfedgm_app.methods import METHODS, get_method
from pfedgm_app.methods.base import ClientState, ClientTask
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_cli.flwr_cli import run_app
from pfedgm_engine.inprocess import run_inprocess

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"),
]
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
SHAPE, K = (3, 32, 32), 5
FAST = {"local-epochs": 1, "personal-epochs": 2, "finetune-epochs": 1}


@pytest.fixture(autouse=True)
def _exact_cuda():
    """TF32 and non-deterministic cuDNN kernels would make CPU and GPU differ by more than
    float rounding; the comparison is about our code, not about those kernels."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)  # fmt: skip
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = saved  # fmt: skip


def _data(n: int = 120) -> ClientData:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % K
    x = torch.randn(n, *SHAPE, generator=g) + y[:, None, None, None].float()
    return ClientData(x[:100], y[:100], x[100:], y[100:], K)


def _task(device: torch.device, **cfg) -> ClientTask:
    config = RunConfig(**{"local_epochs": 1, **cfg})
    rng = torch.Generator().manual_seed(1)  # batches are drawn on the CPU on every device
    return ClientTask(config, _data().to(device), ClientState(), rng, device)


def _plugin(name: str):
    method = get_method(name)
    return method.plugin(method.settings.from_run_config(FAST))


def test_gaussian_objectives_and_gradients_on_cuda_equal_cpu():
    g = torch.Generator().manual_seed(0)
    z, y = torch.randn(64, 16, generator=g), torch.randint(0, K, (64,), generator=g)
    results = []
    for device in (CPU, CUDA):
        torch.manual_seed(0)
        head = GaussianHead(K, 16).to(device)
        zd = z.to(device, copy=True).requires_grad_()  # a leaf on every device
        yd = y.to(device)
        protos, counts = class_means(zd.detach(), yd, K, head.mu.detach())
        loss = (shared_objective(zd, yd, head) + personalized_objective(zd, yd, protos)
                + covariance_objective(zd, yd, head))  # fmt: skip
        loss.backward()
        update_prototypes_(protos, zd[:10], yd[:10], counts)
        results.append([loss, zd.grad, head.mu.grad, head.b.grad, head.A.grad, protos])
    for cpu, gpu in zip(*results, strict=True):
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-6)


def test_pfedgm_round_on_cuda_equals_cpu():
    """One Phase 1 round (H + lambda R_c, nu co-update, prototype updates) from the same start:
    the arrays sent from the GPU equal the CPU's within float tolerance."""
    sent = []
    for device in (CPU, CUDA):
        torch.manual_seed(0)
        plugin = _plugin("pfedgm")
        model = plugin.build_model(SHAPE, K).to(device)
        sent.append(plugin.train(model, _task(device)).arrays)
    for key, value in sent[0].items():
        torch.testing.assert_close(sent[1][key].cpu(), value, rtol=1e-3, atol=1e-4, msg=key)


def test_pfedgm_personalize_on_cuda_matches_cpu():
    """Phase 2 (fine-tuning, L-BFGS biases) on the GPU: the same accuracies as on the CPU, up
    to one test sample (an argmax may flip on float rounding)."""
    reports = []
    for device in (CPU, CUDA):
        torch.manual_seed(0)
        plugin = _plugin("pfedgm")
        model = plugin.build_model(SHAPE, K).to(device)
        reports.append(plugin.personalize(model.eval(), _task(device)).metrics)
    for key, value in reports[0].items():
        assert abs(reports[1][key] - value) <= 1 / 20 + 1e-9, key


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_trains_and_personalizes_on_cuda(name):
    plugin, task = _plugin(name), _task(CUDA)
    torch.manual_seed(0)
    model = plugin.build_model(SHAPE, K).to(CUDA)
    for _ in range(2):  # a second round reads what the first kept in the client state
        # (the server's extras reach the GPU in the ServerApp test below)
        reply = plugin.train(model, task)
        for key, value in {**reply.arrays, **reply.extras}.items():
            assert torch.isfinite(value).all(), key
        fresh = plugin.build_model(SHAPE, K)
        fresh.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        plugin.restore(fresh, task)
        model = fresh.to(CUDA)
    metrics = plugin.personalize(model, task).metrics
    assert all(0.0 <= v <= 1.0 for k, v in metrics.items() if k.startswith("acc")), metrics


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_runs_through_the_apps_on_cuda(name, cifar10, tmp_path):
    """The ServerApp and ClientApps (`pfedgm_engine.inprocess`: no Ray on a GPU machine) on
    CUDA: the client data and state on the GPU, the server's extras sent back to it, every client
    personalized."""
    summary, grid = run_inprocess({
        "method": name, "dataset": str(cifar10), "device": "cuda", "num-server-rounds": 2,
        "fraction-train": 1.0, "local-epochs": 1, "pool-size": 2000, "output-dir": str(tmp_path),
        **FAST,
    }, 4)  # fmt: skip
    assert summary["num-clients-evaluated"] == 4 and len(grid.rounds) == 2
    assert 0 <= summary["mean-accuracy"] <= 100


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="flwr run needs Ray")
def test_clientapps_share_the_gpu_through_flwr_run(cifar10, flower_env, tmp_path):
    """`flwr run` with `client-resources-num-gpus=0.5`: Ray runs two ClientApps at once on
    the GPU (`device=cuda` refuses to run without one), and the run personalizes every
    client (docs/running.md, "On a GPU")."""
    cfg = {"method": "pfedgm", "dataset": str(cifar10), "device": "cuda", "num-server-rounds": 2,
           "fraction-train": 1.0, "local-epochs": 1, "pool-size": 2000,
           "output-dir": str(tmp_path), **FAST}  # fmt: skip
    run = run_app(cfg, 4, flower_env, timeout=900, gpus_per_client=0.5)
    assert run.ok, run.log[-3000:]
    assert run.summary["num-clients-evaluated"] == 4
