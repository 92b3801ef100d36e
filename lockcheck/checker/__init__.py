"""Pure functions from a history to a verdict (see api.py); porcupine/ is the vendored engine."""
