"""Nodes and the services on them.

A provider (local network namespaces by default) gives `Node`s: run a command, start
a daemon and keep its PID, signal it, cut packets from other nodes. Services (redis,
and later zookeeper, etcd, postgres, sentinel) are written once against `Node`.
"""
