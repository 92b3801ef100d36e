"""python-consul, the client the Consul lock libraries on PyPI are built on.

consullock, consul-lock and consulock take a `consul.Consul` (python-consul 1.1.0, the
`consul` module) and call its session and KV methods; their adapters share what is
here: the client for one of the backend's agents, and the one mapping of what
python-consul and `requests` raise to Definite, Indefinite and NotOwner.

python-consul 1.1.0 has no timeout setting: its `requests` session sends every request
without one, and a request in a partition would wait for TCP to give up. The adapters
give the client's session (`client.http.session`, the object consullock's own code
configures too) a default timeout, the run's request timeout, and nothing else:
no retries (python-consul has none), no proxies from the environment (the traffic
stays on the run's bridge), a fresh connection per request (so a refused or
timed-out connect certainly sent nothing). lockcheck's own consul client
(`locks/consul.py`) does not import a `consul` module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import consul
import consul.base as cb
import requests
import requests.exceptions as rqe
from requests.adapters import HTTPAdapter

from lockcheck.locks.api import Definite, Indefinite
from lockcheck.locks.http import never_connected as _never_connected
from lockcheck.locks.http import short as _short

# Consul's replies after which nothing was applied (as in locks/consul.py)
DEFINITE_MESSAGES = ("no cluster leader", "invalid session", "permission denied")


class TimedAdapter(HTTPAdapter):
    """An HTTPAdapter that gives a request without a timeout this one."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(max_retries=0)
        self.timeout_s = timeout_s

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = (self.timeout_s, self.timeout_s)
        return super().send(request, *args, **kwargs)


def consul_client(endpoint: str, timeout_s: float) -> Any:
    """python-consul's `Consul` for one agent (`http://host:port`), with timeouts."""
    u = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    client = consul.Consul(host=u.hostname, port=u.port or 8500, scheme=u.scheme or "http")
    session = requests.Session()
    session.trust_env = False
    session.headers["Connection"] = "close"
    session.mount("http://", TimedAdapter(timeout_s))
    session.mount("https://", TimedAdapter(timeout_s))
    client.http.session = session
    return client


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where python-consul's and `requests`' exceptions become lockcheck's."""
    try:
        yield
    except rqe.ConnectTimeout as e:
        raise Definite("timeout connecting") from e
    except rqe.ConnectionError as e:
        if _never_connected(e):
            raise Definite(_short(str(e))) from e
        raise Indefinite(_short(str(e))) from e  # lost after the request went out
    except (rqe.InvalidURL, rqe.InvalidSchema, rqe.MissingSchema, rqe.InvalidHeader,
            rqe.URLRequired) as e:
        raise Definite(_short(str(e))) from e  # refused before anything was sent
    except rqe.RequestException as e:  # read timeout, broken reply, ...
        raise Indefinite(_short(str(e))) from e
    except cb.Timeout as e:  # python-consul's name for an HTTP 599
        raise Indefinite("timeout") from e
    except (cb.BadRequest, cb.ACLDisabled, cb.ACLPermissionDenied, cb.NotFound,
            cb.ClientError) as e:  # 4xx: refused as asked
        raise Definite(_short(" ".join(str(e).split()))) from e
    except cb.ConsulException as e:  # 5xx: "500 <Consul's message>"
        raise reply_kind(e) from e
    except ValueError as e:  # a reply that is not JSON
        raise Indefinite(f"unreadable reply: {_short(str(e))}") from e


def reply_kind(e: BaseException) -> Definite | Indefinite:
    """A 5xx reply: definite when Consul says nothing was applied."""
    text = " ".join(str(e).split())
    if any(m in text.lower() for m in DEFINITE_MESSAGES):
        return Definite(_short(text))
    return Indefinite(_short(text))  # it may come after the write was proposed


def endpoint_of(config: Any, worker: int) -> str:
    """The agent a worker talks to: the libraries take one; workers spread over them."""
    endpoints = [str(e) for e in config["endpoints"]]
    return endpoints[worker % len(endpoints)]
