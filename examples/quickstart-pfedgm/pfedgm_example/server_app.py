"""ServerApp: pFedGM's strategy, Phase 1 rounds then the personalize round."""

from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from pfedgm_app.run_folder import RunFolder
from pfedgm_app.strategies import PFedGM
from pfedgm_example.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    strategy = PFedGM(fraction_train=cfg["fraction-train"], fraction_evaluate=0.0)
    torch.manual_seed(0)  # a reproducible start
    initial = ArrayRecord(Net().state_dict())
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=cfg["num-server-rounds"])
    report = strategy.personalize(grid, result.arrays, ConfigRecord())  # every client
    print(f"personalized accuracy {report.mean_accuracy:.2f} ({report.std_accuracy:.2f}) %, "
          f"global model {report.means['acc-global']:.2f} %")  # fmt: skip
    if not cfg["output-dir"]:  # an absolute path: the ServerApp runs where the SuperLink started
        return
    folder = RunFolder(Path(cfg["output-dir"]))  # the app's file names and format (percent)
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.write_clients(report.clients)
    folder.write_summary({"mean-accuracy": report.mean_accuracy,
                          "std-accuracy": report.std_accuracy,
                          "ablation-mean-accuracy": report.means,
                          "num-clients-evaluated": len(report.clients)})  # fmt: skip
