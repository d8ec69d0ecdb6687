"""A client task of learnable random images and each method's client plug-in, for the
methods' tests."""

from __future__ import annotations

import torch

from pfedgm_app.data import ClientData
from pfedgm_app.methods import get_method
from pfedgm_app.methods.base import ClientPlugin, ClientState, ClientTask
from pfedgm_app.runconfig.common import RunConfig

SHAPE, K = (3, 32, 32), 4
FAST = {"local-epochs": 1, "personal-epochs": 1, "finetune-epochs": 1}


def _task(n=60, **cfg) -> ClientTask:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, *SHAPE, generator=g)
    y = torch.arange(n) % K
    x += y[:, None, None, None].float()  # class-dependent shift: learnable
    data = ClientData(x, y, x[:20], y[:20], K)
    config = RunConfig(**{"local_epochs": 1, **cfg})
    return ClientTask(config, data, ClientState(), g, torch.device("cpu"))


def plugin(name, **settings) -> ClientPlugin:
    """`name`'s client plug-in with FAST settings plus `settings` (run-config keys)."""
    method = get_method(name)
    return method.plugin(method.settings.from_run_config({**FAST, **settings}))


def _model(name):
    torch.manual_seed(0)
    return plugin(name).build_model(SHAPE, K)


def _train_round(name, task=None, model=None, **settings):
    method, task = plugin(name, **settings), task or _task()
    model = model or _model(name)
    method.restore(model, task)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reply = method.train(model, task)
    return method, task, model, before, reply
