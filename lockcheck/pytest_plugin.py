"""lockcheck's pytest plugin (the `pytest11` entry point): a lock's safety as a test.

    @pytest.mark.lockcheck(backend="redis", client="mypkg.locks:make_clients",
                           nemesis="client-pause,partition", time_limit=20)
    def test_my_lock_is_safe(lockcheck_result):
        lockcheck_result.assert_safe()

`lockcheck_result` runs the test the marker describes (`lockcheck.run` keywords) and
returns its `RunResult`; `assert_safe()` fails with the checkers' explanation and the
path of the report. `lockcheck_run` is the same as a function, for a test that runs
several. Results go under `--lockcheck-results` (default: pytest's temporary folder).
A run needs what `lockcheck test` needs (root and the servers); an option lockcheck
refuses fails the test with lockcheck's one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockcheck.errors import BadInput


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lockcheck-results", default=None,
                     help="Where lockcheck runs keep their folders [default: pytest's "
                          "temporary folder].")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "lockcheck(**options): run a lockcheck test with these options "
                   "(lockcheck.run keywords); the lockcheck_result fixture returns it")


@pytest.fixture
def lockcheck_run(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """`lockcheck_run(backend=..., client=..., nemesis=..., ...)` -> RunResult."""
    from lockcheck.python_api import run

    where = request.config.getoption("--lockcheck-results")
    results = Path(where) if where else tmp_path_factory.mktemp("lockcheck")

    def run_one(**options: Any) -> Any:
        options.setdefault("results_dir", str(results))
        try:
            return run(**options)
        except BadInput as e:
            pytest.fail(f"lockcheck refused the run: {e}", pytrace=False)

    return run_one


@pytest.fixture
def lockcheck_result(request: pytest.FixtureRequest,
                     lockcheck_run: Callable[..., Any]) -> Any:
    """The run described by the test's `@pytest.mark.lockcheck(...)`."""
    marker = request.node.get_closest_marker("lockcheck")
    if marker is None:
        pytest.fail("lockcheck_result needs @pytest.mark.lockcheck(backend=..., ...)",
                    pytrace=False)
    return lockcheck_run(**marker.kwargs)
