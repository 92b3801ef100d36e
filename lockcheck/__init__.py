"""lockcheck: a Jepsen-style tester for distributed locks."""

__version__ = "0.1.0"
