"""results/<test name>/<timestamp>/ with test.json, history.jsonl, results.json, logs.

Written in three steps as Jepsen does: test.json when the run starts, the history
while it runs, results.json at the end. A `latest` link per test name points at the
newest run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

HISTORY = "history.jsonl"
TEST = "test.json"
RESULTS = "results.json"
LOG = "lockcheck.log"
RESOURCE = "resource.jsonl"


def new_run_dir(root: Path, test_name: str) -> Path:
    base = root / test_name
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime())
    d = base / stamp
    n = 1
    while d.exists():
        d = base / f"{stamp}-{n}"
        n += 1
    d.mkdir()
    link = base / "latest"
    tmp = base / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(d.name)
    os.replace(tmp, link)
    return d


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / HISTORY).exists()
