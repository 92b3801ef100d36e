"""What clients do with locks (`lockloop`), and the resource they protect (`resource`)."""
