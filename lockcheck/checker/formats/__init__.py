"""Parsers that turn foreign history formats into lockcheck checker inputs."""
