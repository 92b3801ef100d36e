"""results/<backend>/<workload>/<nemesis>/<timestamp>/ with test.json, history.jsonl,
results.json, logs.

Written in three steps as Jepsen does: test.json when the run starts, the history
while it runs, results.json at the end. A `latest` link beside the runs of one
backend, workload and nemesis points at the newest of them, and `results/latest` at
the newest run of all. A published run keeps its history compressed
(`history.jsonl.xz` or `.gz`); everything that reads a run reads any of them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput

HISTORY = "history.jsonl"
HISTORY_GZ = "history.jsonl.gz"
HISTORY_XZ = "history.jsonl.xz"
# a published run's history, compressed: xz (the smallest), or gzip
PACKED_HISTORIES = (HISTORY_XZ, HISTORY_GZ)
LATEST = "latest"
TEST = "test.json"
RESULTS = "results.json"
LOG = "lockcheck.log"
RESOURCE = "resource.jsonl"


def new_run_dir(root: Path, test_name: str | Sequence[str], *,
                top_latest: bool = False) -> Path:
    """A new timestamped folder under root/<test_name parts>; `latest` beside it points
    at it (and root/latest too with top_latest)."""
    parts = [test_name] if isinstance(test_name, str) else list(test_name)
    base = root.joinpath(*parts)
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime())
    d = base / stamp
    n = 1
    while d.exists():
        d = base / f"{stamp}-{n}"
        n += 1
    d.mkdir()
    _link(base / LATEST, d.name)
    if top_latest:
        _link(root / LATEST, os.path.relpath(d, root))
    return d


def _link(link: Path, target: str) -> None:
    """Point link at target (relative), atomically: a reader never finds it missing."""
    tmp = link.parent / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def history_file(run_dir: Path) -> Path:
    """The run's history: history.jsonl, or a published run's compressed one."""
    for name in (HISTORY, *PACKED_HISTORIES):
        if (run_dir / name).exists():
            return run_dir / name
    return run_dir / HISTORY


def resolve_history(path: Path) -> Path:
    """The history a path names: the file itself, or a run folder's history (a
    published run's compressed one). Raises BadInput."""
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if not path.is_dir():
        return path
    history = history_file(path)
    if not history.is_file():
        raise BadInput(f"{path}: not a run directory (no {HISTORY}) nor a history file")
    return history


def load_test(path: Path) -> dict[str, Any]:
    """test.json of a run directory (or beside a history file); {} if there is none."""
    p = path / TEST if path.is_dir() else path.parent / TEST
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise BadInput(f"{p}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{p}: expected a JSON object")
    return data


def load_results(run_dir: Path) -> dict[str, Any] | None:
    """results.json of a run directory; None where there is none (the run did not
    finish) or it cannot be read."""
    try:
        data = json.loads((run_dir / RESULTS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and history_file(path).exists()


def run_dirs(root: Path) -> Iterator[Path]:
    """Run folders under root (test.json beside a history or results.json), without
    following symlinks (`latest` is one)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if TEST in filenames and any(n in filenames for n in (HISTORY, RESULTS,
                                                                *PACKED_HISTORIES)):
            dirnames[:] = []
            yield Path(dirpath)
        else:
            dirnames.sort()
