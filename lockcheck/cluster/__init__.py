"""Providers: the nodes and client hosts of a run, and the fault plumbing on them.

A provider (local network namespaces by default, Docker containers, SSH hosts) gives
`Node`s: run a command, start a daemon and keep its PID, signal it, cut packets from
other nodes. The databases (`lockcheck/db/`) are written once against `Node`;
`faketime` and `delay_proxy` carry the clock and delay faults to the servers.
"""
