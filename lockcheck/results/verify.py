"""`lockcheck compare --verify`: re-check every run of a results folder from its history
and say where the published verdict differs.

A run's published verdict is the `valid` of its results.json; the re-check runs the
same checkers over the stored history (plain or compressed) with the run's test.json,
and applies the one rule the run itself adds: a run cut short by a harness failure is
never valid. A published verdict with no history to re-check it from is a difference;
a run that crashed before it wrote results.json published no verdict, and is counted
apart (the page shows it as crashed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.checker.analyze import analyze
from lockcheck.history import HistoryError, read_history_full
from lockcheck.results import store


@dataclass(frozen=True)
class Recheck:
    run_dir: Path
    published: Any
    rechecked: Any
    note: str = ""
    verdict: bool = True  # False: the run published no verdict (it crashed)

    @property
    def agrees(self) -> bool:
        return not self.verdict or (self.published == self.rechecked and not self.note)


def recheck(run_dir: Path) -> Recheck:
    try:
        results = json.loads((run_dir / store.RESULTS).read_text())
    except (OSError, ValueError):
        return Recheck(run_dir, None, None, f"no readable {store.RESULTS}", verdict=False)
    published = results.get("valid")
    history = store.history_file(run_dir)
    if not history.exists():
        return Recheck(run_dir, published, None, "no history to re-check")
    try:
        ops = read_history_full(history, allow_truncated=True).ops
    except HistoryError as e:
        return Recheck(run_dir, published, None, f"history unreadable: {e}")
    valid = analyze(ops, store.load_test(run_dir), metrics=False)["valid"]
    if results.get("failure") and valid is True:
        valid = "unknown"  # as the run itself decides (runner.finish)
    return Recheck(run_dir, published, valid)


def verify(root: Path, say: Callable[[str], None] = lambda line: None) -> Iterator[Recheck]:
    """Re-check every run under root, one at a time."""
    for d in sorted(store.run_dirs(root)):
        r = recheck(d)
        say(f"{d.relative_to(root)}: " + ("no verdict" if not r.verdict else
                                          "agrees" if r.agrees else "DIFFERS"))
        yield r
