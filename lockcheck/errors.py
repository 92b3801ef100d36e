"""Errors that the CLI turns into one clear line and a documented exit code."""


class LockcheckError(Exception):
    """Base of lockcheck's own errors."""


class BadInput(LockcheckError):
    """Bad arguments, bad files or a missing prerequisite: exit 254."""
