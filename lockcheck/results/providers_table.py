"""`lockcheck backends` and `doctor`: which faults each provider can inject, and how."""

from __future__ import annotations

from typing import Any

from lockcheck.cluster.providers import all_providers
from lockcheck.nemesis.registry import NEMESES
from lockcheck.results.progress import table


def provider_rows() -> list[dict[str, Any]]:
    rows = []
    for p in all_providers():
        rows.append({"provider": p.name, "description": p.description,
                     "nemeses": [n for n in NEMESES if n not in p.refused],
                     "refused": {n: why for n, why in p.refused.items() if n in NEMESES},
                     "notes": dict(p.notes)})
    return rows


def render_providers() -> str:
    rows = provider_rows()
    head = ("provider", "nemeses it can inject")
    # most providers inject nearly every fault: name the ones they cannot
    body = [(r["provider"], f"all {len(NEMESES)}" if not r["refused"] else
             f"{len(r['nemeses'])}: all but {', '.join(r['refused'])}") for r in rows]
    lines = [table(body, head), ""]
    for r in rows:
        lines.append(f"{r['provider']}: {r['description']}.")
        by_reason: dict[str, list[str]] = {}  # one line per reason, naming its faults
        for n, why in r["refused"].items():
            by_reason.setdefault(why, []).append(n)
        for why, names in by_reason.items():
            lines.append(f"  no {', '.join(names)}: {why}")
        for n, how in r["notes"].items():
            lines.append(f"  {n}: {how}")
    return "\n".join(lines)
