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
    body = [(r["provider"], ", ".join(r["nemeses"])) for r in rows]
    lines = [table(body, head), ""]
    for r in rows:
        lines.append(f"{r['provider']}: {r['description']}.")
        for n, why in r["refused"].items():
            lines.append(f"  no {n}: {why}")
        for n, how in r["notes"].items():
            lines.append(f"  {n}: {how}")
    return "\n".join(lines)
