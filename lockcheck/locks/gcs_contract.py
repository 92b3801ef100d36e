"""What a GCS stand-in honours of the preconditions a lock relies on, measured.

A GCS lock is only as safe as the preconditions its calls carry: a stand-in that
accepts a create-only upload twice, or deletes an object under a stale generation,
makes any lock on it look broken (or safe) for reasons of its own. `probe` asks a
running stand-in, one operation at a time, with the calls google-cloud-storage makes
(and a raw request where the SDK would not use that path), and answers per operation
whether the precondition held.

`HONOURED` is what `probe` finds on the stand-in the `gcs` backends run
(fake-gcs-server 1.54.0, a test checks the two agree). A variant or a `--client`
library that needs an operation it does not honour is refused before anything starts,
with one line naming the call (`refuse_unhonoured`): a run on a stand-in that ignores
the call's precondition would test the stand-in, not the lock.
"""

from __future__ import annotations

import http.client
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from lockcheck.errors import BadInput

STAND_IN = "fake-gcs-server 1.54.0"
# each operation, as what must hold for it to count as honoured
OPERATIONS: dict[str, str] = {
    "create-only": "a multipart upload with ifGenerationMatch=0 of a name that exists "
                   "is refused with 412",
    "overwrite-if-generation": "a multipart upload with ifGenerationMatch=<generation> is "
                               "applied, and refused with 412 once the generation is stale",
    "create-only-race": "create-only uploads racing for one name: exactly one wins",
    "read-generation": "a download gives the content with its generation; the metadata "
                       "gives the generation and `updated`",
    "delete-if-generation": "a delete with ifGenerationMatch=<stale generation> is refused "
                            "with 412 and the object stays",
    "patch-if-metageneration": "a metadata patch with ifMetagenerationMatch=<stale "
                               "metageneration> is refused with 412",
    "simple-upload-if-generation": "a simple upload (uploadType=media) with "
                                   "ifGenerationMatch=0 of a name that exists is refused "
                                   "with 412",
}
# what `probe` finds on fake-gcs-server 1.54.0 (tests/integration/test_gcs.py checks it)
HONOURED: dict[str, bool] = {
    "create-only": True, "overwrite-if-generation": True, "create-only-race": True,
    "read-generation": True, "delete-if-generation": False,
    "patch-if-metageneration": False, "simple-upload-if-generation": False,
}
# the calls of PyPI's gcslock 0.0.6 (its _apis/accessor.py), by the operation each needs
GCSLOCK_CALLS: dict[str, str] = {
    "create-only": "objects.insert uploadType=multipart ifGenerationMatch=0 (acquire)",
    "patch-if-metageneration": "objects.patch ifMetagenerationMatch (takeover and "
                               "renewal)",
    "delete-if-generation": "objects.delete ifGenerationMatch and ifMetagenerationMatch "
                            "(release)",
}
RACERS, RACE_NAMES = 8, 10


def unhonoured(calls: Mapping[str, str],
               honoured: Mapping[str, bool] = HONOURED) -> list[str]:
    """The calls (of operation -> call) whose operation is not honoured."""
    return [call for op, call in calls.items() if not honoured.get(op, False)]


def refuse_unhonoured(who: str, calls: Mapping[str, str],
                      honoured: Mapping[str, bool] = HONOURED) -> None:
    """Raise BadInput (one line) naming the first call the stand-in does not honour."""
    missing = unhonoured(calls, honoured)
    if missing:
        raise BadInput(f"{who}: {STAND_IN} ignores the precondition of "
                       f"{'; of '.join(missing)}, which it relies on: a run would test "
                       "the stand-in, not the lock")


def refuse_gcslock(backend: str) -> None:
    """`--client gcslock`: refused while the stand-in ignores a call gcslock makes."""
    refuse_unhonoured("--client gcslock", GCSLOCK_CALLS)


# -- probing a running stand-in -----------------------------------------------------------


def storage_client(endpoint: str, timeout_s: float = 10.0) -> Any:
    """A google-cloud-storage client of a stand-in: anonymous, the endpoint given."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="lockcheck", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    return client


def _refused(call: Callable[[], object]) -> bool:
    """The call was refused with 412 Precondition Failed."""
    from google.api_core import exceptions as gx

    try:
        call()
    except gx.PreconditionFailed:
        return True
    return False


def _create_only(bucket: Any, name: str) -> bool:
    bucket.blob(name).upload_from_string(b"1", if_generation_match=0, retry=None)
    return _refused(lambda: bucket.blob(name).upload_from_string(
        b"2", if_generation_match=0, retry=None)) and \
        bucket.blob(name).download_as_bytes(retry=None) == b"1"


def _overwrite(bucket: Any, name: str) -> bool:
    blob = bucket.blob(name)
    blob.upload_from_string(b"1", retry=None)
    first = blob.generation
    bucket.blob(name).upload_from_string(b"2", if_generation_match=first, retry=None)
    return _refused(lambda: bucket.blob(name).upload_from_string(
        b"3", if_generation_match=first, retry=None)) and \
        bucket.blob(name).download_as_bytes(retry=None) == b"2"


def _race(bucket: Any, name: str) -> bool:
    from google.api_core import exceptions as gx

    names = [f"{name}-{i}" for i in range(RACE_NAMES)]
    wins = {n: 0 for n in names}
    barrier = threading.Barrier(RACERS)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            barrier.wait(30)
            for n in names:
                try:
                    bucket.blob(n).upload_from_string(b"x", if_generation_match=0,
                                                      retry=None)
                except gx.PreconditionFailed:
                    continue
                with lock:
                    wins[n] += 1
        except BaseException as e:  # counted as not honoured below
            errors.append(e)

    threads = [threading.Thread(target=racer) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return not errors and all(w == 1 for w in wins.values())


def _read(bucket: Any, name: str) -> bool:
    blob = bucket.blob(name)
    blob.upload_from_string(b"content", retry=None)
    got = bucket.blob(name)
    data = got.download_as_bytes(retry=None)
    meta = bucket.get_blob(name, retry=None)
    return (data == b"content" and got.generation == blob.generation
            and meta is not None and meta.generation == blob.generation
            and meta.updated is not None)


def _delete(bucket: Any, name: str) -> bool:
    blob = bucket.blob(name)
    blob.upload_from_string(b"1", retry=None)
    stale = blob.generation
    bucket.blob(name).upload_from_string(b"2", retry=None)
    return _refused(lambda: bucket.blob(name).delete(if_generation_match=stale,
                                                     retry=None)) and \
        bucket.get_blob(name, retry=None) is not None


def _patch(bucket: Any, name: str) -> bool:
    blob = bucket.blob(name)
    blob.upload_from_string(b"1", retry=None)
    blob.reload(retry=None)
    first = blob.metageneration
    blob.metadata = {"n": "1"}
    blob.patch(if_metageneration_match=first, retry=None)
    blob.metadata = {"n": "2"}
    return _refused(lambda: blob.patch(if_metageneration_match=first, retry=None))


def _simple_upload(bucket: Any, name: str, endpoint: str) -> bool:
    """A raw simple upload: the SDK sends small uploads as multipart, never this."""
    bucket.blob(name).upload_from_string(b"1", retry=None)
    url = urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80,
                                      timeout=10)
    try:
        conn.request("POST", f"/upload/storage/v1/b/{bucket.name}/o?uploadType=media"
                             f"&name={name}&ifGenerationMatch=0", body=b"2",
                     headers={"Content-Type": "application/octet-stream"})
        status = conn.getresponse().status
    finally:
        conn.close()
    return status == 412


def probe(endpoint: str, bucket_name: str | None = None,
          only: Sequence[str] | None = None) -> dict[str, bool]:
    """Per operation (`OPERATIONS`), whether the stand-in at `endpoint` honours it; an
    operation whose probe fails in any other way counts as not honoured. Makes its
    own bucket (or uses `bucket_name`) and objects of fresh names."""
    from google.api_core import exceptions as gx

    client = storage_client(endpoint)
    name = bucket_name or f"contract-{uuid.uuid4().hex[:12]}"
    try:
        bucket = client.create_bucket(name, retry=None)
    except gx.Conflict:
        bucket = client.bucket(name)
    checks: dict[str, Callable[[str], bool]] = {
        "create-only": lambda n: _create_only(bucket, n),
        "overwrite-if-generation": lambda n: _overwrite(bucket, n),
        "create-only-race": lambda n: _race(bucket, n),
        "read-generation": lambda n: _read(bucket, n),
        "delete-if-generation": lambda n: _delete(bucket, n),
        "patch-if-metageneration": lambda n: _patch(bucket, n),
        "simple-upload-if-generation": lambda n: _simple_upload(bucket, n, endpoint),
    }
    found: dict[str, bool] = {}
    for op in only or list(OPERATIONS):
        try:
            found[op] = bool(checks[op](f"{op}-{uuid.uuid4().hex[:8]}"))
        except Exception:  # an error is no evidence that the precondition holds
            found[op] = False
    return found
