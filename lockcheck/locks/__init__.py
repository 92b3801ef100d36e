"""Lock clients: one module per backend behind one small interface (see `api.py`)."""
