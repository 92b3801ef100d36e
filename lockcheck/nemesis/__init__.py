"""Faults. Each nemesis has start/stop and a heal that is idempotent and always runs."""
