"""`lockcheck backends`: every backend and variant, its client, fences and faults."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockcheck.backends import BACKENDS
from lockcheck.cluster.api import capabilities
from lockcheck.nemesis.registry import supported
from lockcheck.results.progress import table
from lockcheck.spec import TestSpec


def backend_rows() -> list[dict[str, Any]]:
    rows = []
    for b in BACKENDS.values():
        db = b.make_db(TestSpec(backend=b.name, nodes=b.default_nodes))  # inert until setup
        rows.append({
            "backend": b.name, "family": b.family, "client": b.library,
            "client_version": b.library_version(), "fence": b.fence,
            "default_nodes": b.default_nodes, "capabilities": capabilities(db),
            "nemeses": supported(db), "unsafe": b.unsafe, "description": b.description,
            "expect": b.expect,
        })
    return rows


def render_backends(rows: Sequence[dict[str, Any]]) -> str:
    head = ("backend", "client", "fence", "nodes", "nemeses")
    body = [(r["backend"] + (" (unsafe)" if r["unsafe"] else ""),
             f"{r['client']} {r['client_version']}",
             "yes" if r["fence"] else "none", r["default_nodes"], ", ".join(r["nemeses"]))
            for r in rows]
    lines = [table(body, head), ""]
    for r in rows:
        lines.append(f"{r['backend']}: {r['description']}.")
        lines.append(f"  fence: {r['fence'] or 'none (the backend issues no fencing token)'}")
        lines.append(f"  expect: {r['expect']}.")
    return "\n".join(lines)
