"""The package version, in a module that imports nothing (setup.cfg and `--version` read it)."""

__version__ = "0.1.0"
