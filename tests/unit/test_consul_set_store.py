"""`--resource consul-txn`: the body of the guarded write and what Consul's replies mean
(`workloads/consul_set_store.py`), and where the option is accepted."""

from __future__ import annotations

import base64
import json

import pytest

from lockcheck.errors import BadInput
from lockcheck.spec import TestSpec, validate
from lockcheck.workloads import consul_set_store as c
from lockcheck.workloads.set_store import set_client


def test_the_write_is_guarded_by_the_writers_session_on_its_lock_key() -> None:
    ops = c.txn_body("k1", ["a", "b"], "sess-1")
    assert len(ops) == 2
    # first, and in the same transaction: the writer's session holds the lock key
    # the lock client acquires (`PUT /v1/kv/lockcheck-locks/<name>?acquire=`)
    assert ops[0] == {"KV": {"Verb": "check-session", "Key": "lockcheck-locks/k1",
                             "Session": "sess-1"}}
    set_op = ops[1]["KV"]
    assert set_op["Verb"] == "set" and set_op["Key"] == "lockcheck-set/k1"
    assert json.loads(base64.b64decode(set_op["Value"])) == ["a", "b"]


def test_an_applied_transaction_gives_the_sets_modify_index() -> None:
    reply = {"Results": [{"KV": {"Key": "lockcheck-locks/k1", "ModifyIndex": 40}},
                         {"KV": {"Key": "lockcheck-set/k1", "ModifyIndex": 57}}],
             "Errors": None}
    assert c.txn_outcome("k1", 200, reply) == {"version": 57}


def test_a_failed_session_check_is_a_refusal() -> None:
    reply = {"Results": None, "Errors": [{"OpIndex": 0, "What": "failed session check"}]}
    assert c.txn_outcome("k1", 409, reply) == {"error": "failed session check"}


@pytest.mark.parametrize("status,reply", [(500, None), (200, {"Results": []}),
                                          (409, None), (503, {"Errors": None})])
def test_anything_else_is_an_unknown_outcome(status: int, reply: object) -> None:
    with pytest.raises(OSError):
        c.txn_outcome("k1", status, reply)


def test_a_write_without_a_session_is_refused_before_any_request() -> None:
    client = set_client({"kind": "consul-txn", "endpoints": ["http://127.0.0.1:9"]}, 0.1)
    assert isinstance(client, c.ConsulSetClient)
    try:
        assert "error" in client.write("k1", ["x"], 0, 1, owner=None)
    finally:
        client.close()


def test_consul_txn_needs_a_consul_backend() -> None:
    with pytest.raises(BadInput, match="consul family"):
        validate(TestSpec(backend="etcd", workload="lock-set", resource="consul-txn"))
    s = validate(TestSpec(backend="consul", workload="lock-set", resource="consul-txn",
                          nemesis=("client-pause",)))
    assert s.name == "consul-lock-set-consul-txn-client-pause"
