"""A linearizability checker in the manner of Porcupine (Wing & Gong search, Lowe's cache).

Stdlib only; nothing here imports the rest of lockcheck. See README.md beside this file.
Porcupine is by Anish Athalye (MIT license); this is an independent implementation of
the same algorithm and API shape.
"""

from .checker import (
    check_events,
    check_events_verbose,
    check_operations,
    check_operations_verbose,
    events_to_operations,
)
from .model import (
    UNKNOWN,
    CheckResult,
    Event,
    LinearizationInfo,
    Model,
    Operation,
    PartitionInfo,
    nondeterministic,
)
from .visualize import visualize

__all__ = [
    "UNKNOWN",
    "CheckResult",
    "Event",
    "LinearizationInfo",
    "Model",
    "Operation",
    "PartitionInfo",
    "check_events",
    "check_events_verbose",
    "check_operations",
    "check_operations_verbose",
    "events_to_operations",
    "nondeterministic",
    "visualize",
]
