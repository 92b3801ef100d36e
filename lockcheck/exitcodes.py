"""Exit codes of the lockcheck command (Jepsen's, plus 130 for an interrupted run)."""

VALID = 0
INVALID = 1
UNKNOWN = 2
INTERRUPTED = 130
BAD_INPUT = 254
INTERNAL = 255


def for_verdict(valid: object) -> int:
    """Map a verdict (True, False or "unknown") to the exit code."""
    if valid is True:
        return VALID
    if valid is False:
        return INVALID
    return UNKNOWN


def merge_valid(values: list[object]) -> object:
    """Combine verdicts: False beats "unknown" beats True (as Jepsen's merge-valid)."""
    if any(v is False for v in values):
        return False
    if any(v is not True for v in values):
        return "unknown"
    return True
