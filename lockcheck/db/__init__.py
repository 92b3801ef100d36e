"""The databases lockcheck runs, written once against the node interface."""
