"""Runs started at the same moment get different subnets and names."""

from __future__ import annotations

import threading

import pytest

from lockcheck.cluster.netns import LocalCluster
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from tests.conftest import lockcheck_ids_on_host

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


def test_simultaneous_clusters_do_not_collide() -> None:
    clusters = [LocalCluster(1, 1, Registry(DEFAULT_STATE_DIR)) for _ in range(4)]
    gate = threading.Barrier(len(clusters))

    def up(c: LocalCluster) -> None:
        gate.wait()
        c.up()

    threads = [threading.Thread(target=up, args=(c,)) for c in clusters]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        subnets = [c.state.subnet for c in clusters if c.state is not None]
        assert len(subnets) == 4 and len(set(subnets)) == 4, subnets
        assert len({c.bridge for c in clusters}) == 4
    finally:
        for c in clusters:
            c.down()
    assert not {c.run_id for c in clusters} & lockcheck_ids_on_host()


def test_cleaning_leftovers_spares_a_cluster_being_created() -> None:
    """Every run first reaps what dead runs left; a run starting at that moment must
    not lose its brand-new bridge to it (seen as `Cannot find device lcb...`)."""
    from lockcheck.cluster.netns import cleanup_leftovers

    errors: list[BaseException] = []
    clusters: list[LocalCluster] = []
    gate = threading.Barrier(4)

    def start() -> None:
        gate.wait()
        try:
            for _ in range(3):
                cleanup_leftovers(Registry(DEFAULT_STATE_DIR))
                c = LocalCluster(2, 1, Registry(DEFAULT_STATE_DIR))
                clusters.append(c)
                c.up()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == []
    finally:
        for c in clusters:
            c.down()
    # only our own: other people's runs may come and go on this host meanwhile
    assert not lockcheck_ids_on_host() & {c.run_id for c in clusters}
