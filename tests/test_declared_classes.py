"""The run's class list read from a parquet schema's metadata (`data.labels`) without importing
`datasets`: the list `datasets` reads, for every local copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from pfedgm_app.data.labels import _declared_classes
from pfedgm_app.data.sources import _columns
from tests.conftest import SHARED_DATA as SHARED

# each test with its own disk cache and empty in-memory caches (a new process)
pytestmark = pytest.mark.usefixtures("fresh_caches")


def _features_classes(files: list[Path]) -> tuple[str, ...] | None:
    """What `datasets` reads from a parquet file's schema: the label column's class names."""
    import pyarrow.parquet as pq

    features = datasets.Features.from_arrow_schema(pq.read_schema(files[0]))
    label = features[_columns(str(files[0].parent), features)[1]]
    return tuple(label.names) if isinstance(label, datasets.ClassLabel) else None


@pytest.mark.parametrize("name", ["mnist", "cifar10", "cifar100", "emnist", "tinyimagenet"])
def test_the_declared_class_list_is_the_one_datasets_reads(name):
    """The class list read from a parquet schema's metadata without `datasets` is the one
    `datasets` reads, for every dataset of ../shared/data."""
    files = sorted((SHARED / name).rglob("*.parquet"))
    if not files:
        pytest.skip(f"no parquet files of {name} in ../shared/data")
    import pyarrow.parquet as pq

    assert _declared_classes(pq.read_schema(files[0]).metadata) == _features_classes(files)


def test_the_declared_class_list_follows_columns_choice_or_leaves_it_to_datasets():
    def meta(features):
        return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}

    image, coarse = {"_type": "Image"}, {"names": ["x", "y"], "_type": "ClassLabel"}
    fine = {"names": ["a", "b", "c"], "_type": "ClassLabel"}
    both = {"img": image, "label": coarse, "fine_label": fine}  # as `_columns`: fine_label
    assert _declared_classes(meta(both)) == ("a", "b", "c")
    assert _declared_classes(meta({"img": image, "other": fine})) == ("a", "b", "c")
    for unknown in (
        {"img": image, "label": {"dtype": "int64", "_type": "Value"}},
        {"label": fine},
        {"img": image, "label": {"names": [1, 2], "_type": "ClassLabel"}},
    ):
        assert _declared_classes(meta(unknown)) is None
    assert _declared_classes({}) is None and _declared_classes({b"huggingface": b"{"}) is None


def test_a_local_copys_class_list_is_read_without_importing_datasets(mnist):
    """Every message of a deployment asks for the run's class list in a fresh process:
    `datasets` (seconds to import) stays out of it."""
    code = (
        "import sys; from pfedgm_app.data import run_classes; "
        f"print(run_classes('', {str(mnist)!r})[:2], 'datasets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["('0',", "'1')", "False"]
