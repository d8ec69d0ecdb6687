"""Where the offline copies of the data live beside a checkout: `../shared/data/<name>`.
Standard library only: `pfedgm check` looks there without importing the data pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path


def find_shared(
    name: str, starts: Iterable[Path], accept: Callable[[Path], bool] = Path.is_dir
) -> Path | None:
    """The first `<ancestor>/shared/data/<name>` above any of `starts` that `accept`s, or None:
    where the offline copies of the data live beside a checkout (`../shared/data`)."""
    for start in starts:
        start = Path(start).resolve()
        for ancestor in (start, *start.parents):
            folder = ancestor / "shared" / "data" / name
            if accept(folder):
                return folder
    return None


def shared_parquet(name: str) -> Path | None:
    """`dataset='shared:<name>'`'s folder: the first `<ancestor>/shared/data/<name>` holding
    parquet files above the working directory or the app, or None."""
    starts = (Path.cwd(), Path(__file__).resolve().parents[2])
    return find_shared(name, starts, lambda f: any(f.glob("*.parquet")))
