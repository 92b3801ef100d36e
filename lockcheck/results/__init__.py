"""The results store (one folder per run) and what users see of a run."""
