"""What lockcheck's own HTTP clients share (etcd's gRPC gateway, Consul's API): a session
that cannot send a request twice, and what a `requests` exception says about whether a
request was applied."""

from __future__ import annotations

import requests
import requests.exceptions as rqe
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from lockcheck.locks.api import Definite, Indefinite


def http_session() -> requests.Session:
    """No retries, no proxies from the environment (traffic stays on the run's bridge),
    and a fresh connection per request, so a refused or timed-out connect certainly
    sent nothing."""
    session = requests.Session()
    session.trust_env = False
    session.headers["Connection"] = "close"
    session.mount("http://", HTTPAdapter(max_retries=0))
    return session


def never_connected(e: BaseException) -> bool:
    """A refused or timed-out connect: urllib3's reason, somewhere in the chain."""
    seen: list[BaseException] = [e]
    while seen:
        x = seen.pop()
        if isinstance(x, (NewConnectionError, ConnectTimeoutError)):
            return True
        seen += [a for a in x.args if isinstance(a, BaseException)]
        reason = getattr(x, "reason", None)
        if isinstance(reason, BaseException):
            seen.append(reason)
    return False


def short(msg: str) -> str:
    m = msg.lower()
    if "refused" in m:
        return "connection refused"
    if "timed out" in m or "timeout" in m:
        return "timeout"
    if "reset" in m or "aborted" in m or "closed" in m or "disconnected" in m:
        return "connection lost"
    return msg[:80]


def request_error(e: rqe.RequestException | OSError) -> Definite | Indefinite:
    """A `requests` exception (or an OSError from below it): Definite where the request
    certainly never left or was refused before it was sent, else Indefinite."""
    if isinstance(e, rqe.JSONDecodeError):  # (an InvalidJSONError) a reply we cannot read
        return Indefinite("unreadable reply")
    if isinstance(e, rqe.ConnectTimeout):
        return Definite("timeout connecting")
    if isinstance(e, rqe.ConnectionError):
        if never_connected(e):
            return Definite(short(str(e)))
        return Indefinite(short(str(e)))  # lost after the request went out
    if isinstance(e, (rqe.InvalidURL, rqe.InvalidSchema, rqe.MissingSchema,
                      rqe.InvalidHeader, rqe.URLRequired, rqe.InvalidJSONError)):
        return Definite(short(str(e)))  # refused before anything was sent
    return Indefinite(short(str(e)))  # read timeout, broken reply, redirects, OSError
