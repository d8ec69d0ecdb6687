"""docs/run-config.md's tables, formatted from the settings groups that declare the keys
(`config.RunConfig`, each registered method's `Settings`): each key's default, its bound and its
meaning (the field's `doc`), so the page (written with the other references by
`python -m devtools.reference`) is the code's own account; a test requires a meaning for every
key.
"""

from __future__ import annotations

from dataclasses import fields

from pfedgm_app.methods import METHODS, settings_groups
from pfedgm_app.runconfig.presets import toml_value
from pfedgm_app.runconfig.settings import Settings

UNDOCUMENTED = (
    "**undocumented: give the field a `doc` (pfedgm_app/runconfig/common.py: `setting`)**"
)


def _bound(f) -> str:
    """A field's bounds as an interval, `[0, 1)`, or a half-line, `>= 0`."""
    m = f.metadata
    low = ("[", m["min"]) if "min" in m else ("(", m["gt"]) if "gt" in m else None
    high = (m["max"], "]") if "max" in m else (m["lt"], ")") if "lt" in m else None
    if low and high:
        return f"{low[0]}{_number(low[1])}, {_number(high[0])}{high[1]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
    return ""


def _number(value: float) -> str:
    """1e6 as 10^6, 100.0 as 100: a bound read at a glance."""
    if not float(value).is_integer():
        return f"{value:g}"
    digits = str(int(value))
    return f"10^{len(digits) - 1}" if len(digits) > 4 and digits.strip("0") == "1" else digits


def group_title(group: type[Settings]) -> str:
    """'every method' for the common keys, else the methods that read the group's keys."""
    if group is settings_groups()[0]:
        return "every method"
    users = [f"`{m.name}`" for m in METHODS.values() if m.settings is group]
    return ", ".join(users)


def run_config_tables() -> str:
    """One table per settings group (key, default, bound, meaning), in the registry's order;
    groups without keys are left out."""
    parts = []
    for group in settings_groups():
        rows = [(group.key(f.name), f.default, _bound(f)) for f in fields(group)]
        if not rows:
            continue
        lines = [
            f"## {group_title(group)} (`{group.__name__}`)",
            "",
            "| key | default | bound | meaning |",
            "|---|---|---|---|",
        ]
        meanings = group.meanings()
        for key, default, bound in rows:
            meaning = meanings[key] or UNDOCUMENTED
            lines.append(f"| `{key}` | `{toml_value(default)}` | {bound} | {meaning} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
