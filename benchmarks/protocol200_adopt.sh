#!/usr/bin/env bash
# The finished runs of benchmarks/protocol200.sh into the grid's layout (checked against the
# grid's run-config by adopt_runs.py), then rendered with the standard and adaptation tables:
#   benchmarks/protocol200_adopt.sh /abs/results/protocol200 results/paper/r200/runs docs/results/r200
set -euo pipefail
src=${1:?give the results folder of protocol200.sh}
runs=${2:?give the folder of the adopted runs, e.g. results/paper/r200/runs}
to=${3:?give the rendered folder, e.g. docs/results/r200}
here=$(cd "$(dirname "$0")" && pwd)
pairs=()
for run in "$src"/*/*/summary.json; do
  [ -e "$run" ] || continue
  dir=$(dirname "$run"); method=$(basename "$dir"); cell=$(basename "$(dirname "$dir")")
  dataset=${cell%-*} alpha=${cell##*-}
  pairs+=("$dir=$dataset-dir${alpha/./}/$method/0")
done
python "$here/adopt_runs.py" --to "$runs" "${pairs[@]}"
pfedgm-paper render --out "$runs" --to "$to" --tables standard,adaptation
