"""`lockcheck.run(...)`: one test from Python, the same run as `lockcheck test`.

Options are `TestSpec`'s fields as keywords, with the CLI's spellings accepted where
they are friendlier (`nemesis="client-pause,partition"`, `hold_ms="50-500"`), and
`nodes` defaulting to the backend's. The result carries the verdict, each checker's
result, the metrics and the run's folder, and can say why a run was not safe
(`explain`, `assert_safe`: what the pytest plugin fails with).
"""

from __future__ import annotations

import dataclasses
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from lockcheck.errors import BadInput
from lockcheck.spec import TestSpec
from lockcheck.syspath import add_system_dirs


class UnsafeRun(AssertionError):
    """A run whose verdict is not `valid`; the message says why and where the report is."""


@dataclass(frozen=True)
class RunResult:
    valid: object  # True, False or "unknown"
    summary: str
    checkers: dict[str, Any]
    metrics: dict[str, Any]
    results_dir: Path
    report: Path | None
    spec: TestSpec
    results: dict[str, Any] = field(repr=False)
    output: str = field(default="", repr=False)  # what `lockcheck test` would have printed
    failure: str | None = None  # the harness failed mid-run (what was recorded was checked)

    @property
    def safe(self) -> bool:
        return self.valid is True

    def explain(self) -> str:
        """The verdict, each checker that did not pass with its explanation, the report."""
        from lockcheck.results.progress import checker_detail, verdict_word

        lines = [f"lockcheck {self.spec.name}: {verdict_word(self.valid)}: {self.summary}"]
        for name, c in self.checkers.items():
            if isinstance(c, dict) and c.get("valid") is not True:
                detail = checker_detail(name, c)
                first = (c.get("violations") or [None])[0]
                if isinstance(first, dict):  # where to look first
                    where = [f"{k} {first[k]}" for k in ("key", "workers", "processes")
                             if k in first]
                    detail += f"; the first: {', '.join(where)}" if where else ""
                lines.append(f"  {name}: {verdict_word(c.get('valid'))}: {detail}")
        if self.failure:
            lines.append(f"  the run failed: {self.failure}")
        lines.append(f"report: {self.report or self.results_dir}")
        return "\n".join(lines)

    def assert_safe(self) -> None:
        """Raise `UnsafeRun` (an AssertionError) unless the verdict is valid."""
        if not self.safe:
            raise UnsafeRun(self.explain())


def make_spec(spec: TestSpec | None = None, **options: Any) -> TestSpec:
    """A TestSpec from keywords (or a spec with some fields replaced); BadInput for an
    option that is not one."""
    from lockcheck.backends import backend
    from lockcheck.nemesis.registry import parse_nemesis
    from lockcheck.workloads.hold import parse_hold

    fields = {f.name for f in dataclasses.fields(TestSpec)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise BadInput(f"unknown option(s) {', '.join(unknown)}; TestSpec has "
                       f"{', '.join(sorted(fields))}")
    if isinstance(options.get("nemesis"), str):
        options["nemesis"] = parse_nemesis(options["nemesis"])
    elif "nemesis" in options:
        options["nemesis"] = tuple(options["nemesis"])
    if isinstance(options.get("hold_ms"), str):
        hold = parse_hold(options["hold_ms"])
        options["hold_ms"], options["hold_dist"] = hold.bounds, hold.dist
    if spec is not None:
        return dataclasses.replace(spec, **options)
    if "nodes" not in options:
        options["nodes"] = backend(options.get("backend", TestSpec.backend)).default_nodes
    return TestSpec(**options)


def run(spec: TestSpec | None = None, /, *, out: IO[str] | None = None,
        **options: Any) -> RunResult:
    """Run one test (see `lockcheck.api.run`). `out`: where the progress and summary go
    as the run goes (default: kept in `RunResult.output` only)."""
    from lockcheck.runner import run_test

    add_system_dirs(os.environ)  # root's tools, also from a cleared environment
    spec = make_spec(spec, **options)
    sink = io.StringIO()
    stream: IO[str] = sink if out is None else cast(IO[str], _Tee(sink, out))
    outcome = run_test(spec, out=stream)
    r = outcome.results
    report = outcome.run_dir / "report.html"
    return RunResult(valid=outcome.valid, summary=str(r.get("summary", "")),
                     checkers=dict(r.get("checkers") or {}),
                     metrics=dict(r.get("metrics") or {}), results_dir=outcome.run_dir,
                     report=report if report.exists() else None, spec=spec, results=r,
                     output=sink.getvalue(), failure=outcome.failure)


class _Tee(io.TextIOBase):
    def __init__(self, *streams: IO[str]) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()

    def isatty(self) -> bool:
        return False


__all__ = ["RunResult", "UnsafeRun", "make_spec", "run"]
