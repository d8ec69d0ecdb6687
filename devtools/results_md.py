"""Put the rendered tables into RESULTS.md (and any page): a block between

    <!-- rendered: docs/results/r30/standard.md -->
    ...
    <!-- end rendered -->

is replaced by that file's text (`pfedgm-paper render` writes it from runs), so the pages' tables
are generated, never typed. `python -m devtools.results_md` rewrites the blocks;
`tests/test_docs.py` fails when a block differs from its file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    ROOT / "RESULTS.md",
    ROOT / "REPRODUCING.md",
    ROOT / "docs" / "flower-baseline.md",
    *sorted((ROOT / "docs" / "notes").glob("*.md")),
)
BLOCK = re.compile(r"(<!-- rendered: (\S+) -->\n)(.*?)(<!-- end rendered -->)", re.S)
COMMAND = "python -m devtools.results_md"


def spliced(text: str, root: Path = ROOT) -> str:
    """`text` with each block's body replaced by its file's text."""

    def body(match: re.Match) -> str:
        source = root / match.group(2)
        if not source.exists():
            raise FileNotFoundError(
                f"{match.group(2)}: no such rendered file (pfedgm-paper render)"
            )
        return match.group(1) + source.read_text() + match.group(4)

    return BLOCK.sub(body, text)


def main() -> None:
    for page in PAGES:
        text = page.read_text()
        if (new := spliced(text)) != text:
            page.write_text(new)
            print(f"updated {page.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
