"""Knossos's and Jepsen's own histories: every verdict their sources state (126).

The corpus lives in ``../shared/testdata/jepsen-histories`` beside the repository (its
README names each source); clones without it skip these tests. `expected.json` gives
each file's model and initial value (Knossos's tests use ``(cas-register 0)``).

Six histories are "valid" in Knossos only vacuously: three have no client operation,
and in three every operation failed (nothing took effect). lockcheck says "unknown"
for a history from which nothing was checked, so for those the test asserts that,
with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lockcheck.checker.external import check_external

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "jepsen-histories"
NO_CORPUS = (f"the Jepsen/Knossos history corpus is not beside this clone ({DATA}); "
             "it ships in the project's shared/ folder only")
EXPECTED = DATA / "expected.json"


EMPTY, ALL_FAILED = "no client operations", "every operation of the model failed"
VACUOUS = {
    "tickloom/empty-cas-register.edn": EMPTY,
    "tickloom/empty-mutex.edn": EMPTY,
    "knossos/data/cas-register/good/mongodb-v0-ack-rollback-.edn": EMPTY,  # nemesis only
    **{f"knossos/data/cas-register/good/mongodb-v0-ack-rollback-{n}.edn": ALL_FAILED
       for n in ("10", "11", "9")},
}


def _expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}


def _cases() -> list[Any]:
    expected = _expected()
    if not expected:
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=NO_CORPUS))]
    return [pytest.param(name, want, id=name) for name, want in sorted(expected.items())]


def check(name: str, want: dict[str, Any], **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"model": want["model"], "fmt": want["format"], "timeout": 60.0,
                            "html_dir": None, "allow_truncated": False,
                            "initial": want.get("initial")}
    args.update(kw)
    return check_external(DATA / name, **args)


@pytest.mark.parametrize(("name", "want"), _cases())
def test_verdict(name: str, want: dict[str, Any]) -> None:
    r = check(name, want)
    if name in VACUOUS:
        # Knossos: vacuously valid (the corpus's `knossos_valid`; newer copies of the
        # corpus give lockcheck's own expected verdict, unknown, as `valid`)
        assert want.get("knossos_valid", want["valid"]) is True
        assert want["valid"] in (True, "unknown")
        assert r["valid"] == "unknown" and VACUOUS[name] in r["not_checked"]
        return
    assert r["valid"] is want["valid"], r.get("summary")
    assert r["ops"] > 0


def test_corpus_is_complete() -> None:
    expected = _expected()
    if not expected:
        pytest.skip(NO_CORPUS)
    assert len(expected) == 126
    assert all((DATA / name).is_file() for name in expected)


# --- nothing checked is never valid -------------------------------------------------


def _corpus(name: str) -> Path:
    if not EXPECTED.exists():
        pytest.skip(NO_CORPUS)
    return DATA / name


def test_multi_register_history_with_the_default_and_a_wrong_model() -> None:
    path = _corpus("knossos/data/multi-register/good/multi-register.edn")
    base = {"fmt": None, "timeout": 30.0, "html_dir": None, "allow_truncated": False}
    # the default model for txn ops is multi-register; Knossos's registers start at 0
    r = check_external(path, model=None, initial={"x": 0, "y": 0}, **base)
    assert (r["model"], r["valid"]) == ("multi-register", True)
    # a model that understands none of the 250 txn ops checks nothing: unknown, not valid
    r = check_external(path, model="cas-register", **base)
    assert r["valid"] == "unknown" and r["ops"] == 0
    assert "txn" in r["not_checked"] and "nothing was checked" in r["not_checked"]


def test_mutex_history_checked_as_a_register_is_unknown() -> None:
    path = _corpus("knossos/data/mutex/bad/etcd.edn")
    base = {"fmt": None, "timeout": 30.0, "html_dir": None, "allow_truncated": False}
    r = check_external(path, model="register", **base)
    assert r["valid"] == "unknown"
    assert "acquire" in r["not_checked"] and "release" in r["not_checked"]
    assert check_external(path, model=None, **base)["valid"] is False
