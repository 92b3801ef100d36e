"""How long a critical section lasts (`--hold-ms`): fixed, uniform, or with a long tail.

    200                       always 200 ms
    50-500                    uniform between 50 and 500 ms
    lognormal:200:1           median 200 ms, sigma 1 (of the log): most sections are
                              short, a few are many times longer; capped at 20x the
                              median unless a cap is given: lognormal:200:1:3000
    pareto:50:1.5             at least 50 ms, tail index 1.5 (smaller: heavier tail);
                              capped at 20x the minimum unless given: pareto:50:1.5:5000

The usual advice is to set the TTL from the measured p99 hold time; a long tail is
what makes a fixed TTL too short now and then (a holder still working when its lease
runs out), so it is worth testing on purpose. The cap keeps a run's end bounded: the
runner waits up to the longest hold for the workers to leave their sections.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from lockcheck.errors import BadInput
from lockcheck.spec import parse_range_ms

DEFAULT_CAP = 20  # a long tail is capped at this many times its median or minimum
SYNTAX = "milliseconds like 200 or 50-500, or a long tail: lognormal:MEDIAN:SIGMA[:MAX] " \
         "or pareto:MIN:ALPHA[:MAX]"


@dataclass(frozen=True)
class Hold:
    """A parsed --hold-ms: bounds in ms (lo, hi), and a long-tail law or None (uniform)."""

    bounds: tuple[int, int]
    dist: str | None = None  # normalized, e.g. "lognormal:200:1:4000"


def _num(part: str, text: str) -> float:
    try:
        v = float(part)
    except ValueError:
        raise BadInput(f"--hold-ms must be {SYNTAX}, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise BadInput(f"--hold-ms {text!r}: every number must be positive")
    return v


def parse_hold(text: str) -> Hold:
    text = text.strip()
    law, _, rest = text.partition(":")
    if law in ("lognormal", "pareto"):
        parts = rest.split(":")
        if len(parts) not in (2, 3):
            raise BadInput(f"--hold-ms must be {SYNTAX}, got {text!r}")
        a, b = _num(parts[0], text), _num(parts[1], text)
        cap = _num(parts[2], text) if len(parts) == 3 else DEFAULT_CAP * a
        if cap < a:
            raise BadInput(f"--hold-ms {text!r}: the cap is below the "
                           f"{'median' if law == 'lognormal' else 'minimum'}")
        lo = 0 if law == "lognormal" else int(a)
        return Hold((lo, math.ceil(cap)), f"{law}:{a:g}:{b:g}:{cap:g}")
    if not text[:1].isdigit():
        raise BadInput(f"--hold-ms must be {SYNTAX}, got {text!r}")
    return Hold(parse_range_ms(text, "--hold-ms"))


def sampler(bounds: tuple[int, int], dist: str | None) -> Callable[[random.Random], float]:
    """A function drawing one hold time in ms."""
    lo, hi = bounds
    if dist is None:
        return lambda rng: rng.uniform(lo, hi)
    law, a_s, b_s, cap_s = dist.split(":")
    a, b, cap = float(a_s), float(b_s), float(cap_s)
    if law == "lognormal":
        mu = math.log(a)
        return lambda rng: min(cap, rng.lognormvariate(mu, b))
    if law == "pareto":
        return lambda rng: min(cap, a * rng.paretovariate(b))
    raise ValueError(f"unknown hold distribution {dist!r}")
