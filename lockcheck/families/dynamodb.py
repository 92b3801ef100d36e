"""The dynamodb backends: dynalite (a DynamoDB stand-in) on one node and lockcheck's own
client of DynamoDB's conditional writes on boto3 (`lockcheck/locks/dynamodb.py`)."""

from __future__ import annotations

from typing import Any

from lockcheck.backend import Backend
from lockcheck.servers import program

# dynalite from the npm registry, run by lockcheck's own Node (Debian's is too old)
SERVERS = {program("dynalite"): "npm:dynalite@4.0.0"}
SETUP = "lockcheck.locks.dynamodb:create_table"
FENCE = "a counter in the lock's item, ADD 1 in the grant's conditional write (the item " \
        "is kept at release, so the counter survives)"


def _dynamodb(**kw: Any) -> Backend:
    base: dict[str, Any] = dict(
        family="dynamodb", db="lockcheck.db.dynalite:DynaliteDB",
        client="lockcheck.locks.dynamodb:make_clients", library="boto3",
        servers=SERVERS, server="dynalite", default_nodes=1, max_nodes=1, fence=FENCE)
    options = {"setup": SETUP, **kw.pop("options", {})}
    return Backend(**{**base, **kw, "options": options})


BACKENDS: tuple[Backend, ...] = (
    _dynamodb(
        name="dynamodb", fence_counts_grants=True,
        description="DynamoDB (dynalite 4.0 stand-in): awslabs' lock-client algorithm on "
                    "boto3 conditional writes: a grant when the item has no owner, or a "
                    "takeover of a record version seen unchanged for a whole TTL on the "
                    "waiter's monotonic clock; renewed every TTL/3 with a new version; "
                    "released by removing the owner; SDK retries off",
        expect="safe under partition, kill (its data survives a restart) and pause; a "
               "holder paused past its lease (client-pause) overlaps the next one, and "
               "the fence stops its stale write",
    ),
    _dynamodb(
        name="dynamodb-wallclock", unsafe=True,
        description="dynamodb with the common boto3 recipe: expires_at = time.time() + "
                    "TTL from the client's wall clock, taken over when expires_at is "
                    "behind the taker's wall clock",
        expect="a client whose wall clock is off (clock-skew or clock-bump with "
               "--clock-targets clients) takes a held lock: mutual exclusion fails with "
               "no server fault",
        options={"expiry": "wallclock"},
    ),
    _dynamodb(
        name="dynamodb-release-delete", unsafe=True,
        description="dynamodb, but a release deletes the lock's item (a tidy table)",
        fence="a counter in the lock's item, ADD 1 in the grant's conditional write; "
              "1 again after every release, which deletes the item",
        expect="fences go back to 1 with no fault at all: the fencing checker reports "
               "the same fence granted again and again, and the fenced resource refuses "
               "current holders' writes",
        options={"release": "delete"},
    ),
    _dynamodb(
        name="dynamodb-retries", unsafe=True, fence_counts_grants=True,
        description="dynamodb with botocore's default retries (standard mode, 3 "
                    "attempts) instead of one attempt",
        expect="a grant whose reply was lost (loss) is retried and refused by "
               "its own first attempt: the client is told busy for a grant the service "
               "made; the hidden-grants checker finds the fence it used up",
        options={"retries": "standard"},
    ),
)
