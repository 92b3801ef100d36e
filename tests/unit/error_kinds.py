"""What a client's `mapped_errors()` turns an exception into, for the error-table tests."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from lockcheck.locks.api import Definite, Indefinite, NotOwner


def error_kind(mapped_errors: Callable[[], AbstractContextManager[None]],
               exc: BaseException) -> tuple[str, str]:
    """("NotOwner"|"Definite"|"Indefinite"|"passes", message) for `exc` raised inside."""
    try:
        with mapped_errors():
            raise exc
    except NotOwner as e:
        return "NotOwner", str(e)
    except Definite as e:
        return "Definite", str(e)
    except Indefinite as e:
        return "Indefinite", str(e)
    except BaseException as e:
        return "passes", type(e).__name__
    raise AssertionError("unreachable")
