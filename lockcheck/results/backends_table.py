"""`lockcheck backends`: every backend and variant, its client, fences and faults."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from typing import Any

from lockcheck.backends import BACKENDS
from lockcheck.clients import CLIENTS
from lockcheck.cluster.api import capabilities
from lockcheck.nemesis.registry import NEMESES, NemesisKind, supported
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
    by_name = {r["backend"]: r for r in rows}
    for a in CLIENTS.values():
        rows.append({
            "adapter": a.name, "backend": a.backends[0], "backends": list(a.backends),
            "client": a.library, "client_version": _version(a.library), "fence": a.fence,
            "default_nodes": by_name[a.backends[0]]["default_nodes"],
            "nemeses": by_name[a.backends[0]]["nemeses"], "unsafe": a.unsafe,
            "description": a.description, "expect": a.expect,
        })
    return rows


def aimed_faults() -> list[NemesisKind]:
    """The faults that reproduce a published scenario, each with what it shows."""
    return [k for k in NEMESES.values() if k.shows]


def _version(library: str) -> str:
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def render_backends(rows: Sequence[dict[str, Any]]) -> str:
    backends = [r for r in rows if "adapter" not in r]
    adapters = [r for r in rows if "adapter" in r]
    head = ("backend", "client", "fence", "nodes", "nemeses")
    body = [(r["backend"] + (" (unsafe)" if r["unsafe"] else ""),
             f"{r['client']} {r['client_version']}",
             "yes" if r["fence"] else "none", r["default_nodes"], ", ".join(r["nemeses"]))
            for r in backends]
    lines = [table(body, head), ""]
    for r in backends:
        lines.append(f"{r['backend']}: {r['description']}.")
        lines.append(f"  fence: {r['fence'] or 'none (the backend issues no fencing token)'}")
        lines.append(f"  expect: {r['expect']}.")
    lines += ["", "Faults aimed the way published scenarios aim them (--nemesis NAME):", ""]
    for k in aimed_faults():
        lines.append(f"{k.name}: {k.description}.")
        lines.append(f"  shows: {k.shows}.")
    if adapters:
        lines += ["", "Clients of lock libraries, run against a backend's servers with "
                  "--client NAME (or your own: --client MODULE:FACTORY):", ""]
        clients = [(r["adapter"] + (" (unsafe)" if r["unsafe"] else ""),
                 f"{r['client']} {r['client_version']}", "yes" if r["fence"] else "none",
                 ", ".join(r["backends"])) for r in adapters]
        lines += [table(clients, ("client", "library", "fence", "backends")), ""]
        for r in adapters:
            lines.append(f"{r['adapter']} (--backend {' | '.join(r['backends'])} "
                         f"--client {r['adapter']}): {r['description']}.")
            lines.append(f"  fence: {r['fence'] or 'none (the library issues no fencing token)'}")
            lines.append(f"  expect: {r['expect']}.")
    return "\n".join(lines)
