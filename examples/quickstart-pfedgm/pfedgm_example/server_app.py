"""ServerApp: pFedGM's strategy, Phase 1 rounds then the personalize round."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from pfedgm_app.records.run_outputs import RunOutputs
from pfedgm_app.strategies import PFedGM
from pfedgm_example.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    # the app's files and checks: a finished run's output-dir is refused before round 1
    outputs = RunOutputs.start(cfg["output-dir"]) if cfg["output-dir"] else None
    strategy = PFedGM(fraction_train=cfg["fraction-train"])  # no federated evaluation by default
    torch.manual_seed(0)  # a reproducible start
    initial = ArrayRecord(Net().state_dict())
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=cfg["num-server-rounds"])
    report = strategy.personalize(grid, result.arrays, ConfigRecord())  # every client
    if outputs:  # config.json, rounds.jsonl, global model, clients.csv, summary.json (last)
        outputs.finish(grid, cfg, result, report, strategy)
    print(f"personalized accuracy {report.mean_accuracy:.2f} ({report.std_accuracy:.2f}) %, "
          f"global model {report.means['acc-global']:.2f} %")  # fmt: skip
