#!/usr/bin/env bash
# The library as another Flower project gets it: the sdist and the wheel built from this tree,
# the wheel installed into a fresh virtual environment, and the example project
# (examples/quickstart-pfedgm) run against it through `flwr run`, from a folder outside the
# clone, so that nothing of the clone can stand in for what the wheel lacks.
#   .ci/wheel_check.sh            (from any folder; needs ../shared/data/cifar10 beside the clone)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
python -m pip install --quiet build
python -m build --outdir "$work/dist" "$root" > "$work/build.log"
ls "$work"/dist/pfedgm_app-*.tar.gz > /dev/null  # the sdist too
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --upgrade pip
# The library install of examples/quickstart-pfedgm/README.md: PyTorch's CPU build from its
# index, in the same step. Where that index cannot be reached (an offline CI's registry
# mirror), the configured indexes give torch, and the CPU check below is skipped.
cpu_torch=https://download.pytorch.org/whl/cpu
if python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10)' "$cpu_torch" 2>/dev/null; then
  index=(--extra-index-url "$cpu_torch")
else
  echo "wheel check: $cpu_torch cannot be reached; torch from the configured indexes" >&2
  index=()
fi
"$work/venv/bin/pip" install --quiet "$work"/dist/pfedgm_app-*.whl "${index[@]}"
if [ ${#index[@]} -gt 0 ]; then  # no CUDA build pulled in
  "$work/venv/bin/python" -c 'import torch; assert torch.version.cuda is None, torch.__version__'
fi
cp -r "$root/examples/quickstart-pfedgm" "$work/example"
cd "$work"  # no clone on any path from here
export PATH="$work/venv/bin:$PATH" FLWR_HOME="$work/flwr-home"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_TELEMETRY_ENABLED=0 HF_HUB_OFFLINE=1
# Free ports: on Flower's defaults, `flwr run` would use another FLWR_HOME's managed SuperLink
# (e.g. one a `pfedgm-paper run` left up), whose environment is not this one.
free_port() { python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=$(free_port) FLWR_LOCAL_CONTROL_API_PORT=$(free_port)
python - "$root" <<'EOF'
import sys
from pathlib import Path

import pfedgm_app

assert Path(sys.argv[1]) not in Path(pfedgm_app.__file__).resolve().parents, pfedgm_app.__file__
print("pfedgm_app from", Path(pfedgm_app.__file__).parent)
EOF
python - "$root/../shared/data/cifar10" "$work/data" <<'EOF'
import sys
from pathlib import Path

import pyarrow.parquet as pq

source, target = Path(sys.argv[1]), Path(sys.argv[2])
target.mkdir()
for split, rows in (("train", 1200), ("test", 200)):  # every k-th row: a quick data load
    table = pq.read_table(source / f"{split}.parquet")
    every = table.num_rows // rows
    pq.write_table(table.take(list(range(0, every * rows, every))), target / f"{split}.parquet")
EOF
stop() { pfedgm superlink stop || true; }
trap stop EXIT
flwr run example --stream --federation-config "num-supernodes=2" --run-config \
  "data-dir='$work/data' samples-per-client=300 num-server-rounds=2 local-epochs=1 output-dir='$work/out'"
for file in summary.json clients.csv rounds.jsonl; do  # the app's files, as the app writes them
  test -f "$work/out/$file" || { echo "the example's run failed: no $file" >&2; exit 1; }
done
echo "the example ran against the wheel: $(head -c 300 "$work/out/summary.json")"
stop && trap - EXIT
rm -rf "$work"  # kept only when a step failed
