"""Typed, immutable specs: what the catalogs and config files are parsed into."""
