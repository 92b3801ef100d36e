"""Backend families defined beside their own database and client modules: each module
has a `BACKENDS` tuple that `lockcheck.backends.FAMILIES` names."""
