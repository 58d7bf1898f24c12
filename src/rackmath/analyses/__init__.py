"""Analyses: core math composed into answers (no I/O)."""
