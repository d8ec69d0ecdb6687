"""`python -m devtools.reference`: writes the reference pages into docs/ (or a folder given),
privacy.md only where the local MNIST copy is (`--data`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from pfedgm_app.runconfig.presets import PRESETS, conf_file

from . import COMMAND
from . import __doc__ as DOC
from .privacy import leaves_device_block, privacy_page, record_replies
from .registry_pages import pages

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def default_data() -> Path:
    """The local MNIST copy that privacy.md's run reads: PFEDGM_SHARED_DATA, else beside the
    checkout."""
    shared = os.environ.get("PFEDGM_SHARED_DATA") or ROOT.parent / "shared" / "data"
    return Path(shared) / "mnist"


def write_conf(folder: Path) -> None:
    """`conf/<preset>.toml` for every preset, and no other file there."""
    folder.mkdir(exist_ok=True)
    for stale in folder.glob("*.toml"):
        stale.unlink()
    for preset in PRESETS.values():
        (folder / f"{preset.name}.toml").write_text(conf_file(preset))


def main(argv: list[str] | None = None) -> int:
    """Write every page into `out`; 1 when privacy.md could not be written (no MNIST copy)."""
    parser = argparse.ArgumentParser(prog=COMMAND, description=DOC.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DOCS, help="folder (docs/)")
    parser.add_argument(
        "--data", type=Path, default=default_data(), help="the local MNIST copy (parquet)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    written = pages()
    for name, text in written.items():
        (args.out / name).write_text(text)
    write_conf(ROOT / "conf")
    if not (args.data / "train.parquet").exists():
        print(
            f"wrote {sorted(written)}; privacy.md NOT written: no {args.data}/train.parquet "
            "(give --data)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="pfedgm-reference-") as workdir:
        replies, models = record_replies(args.data, Path(workdir))
    (args.out / "privacy.md").write_text(privacy_page(leaves_device_block(replies, models)))
    print(f"wrote {sorted([*written, 'privacy.md'])} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
