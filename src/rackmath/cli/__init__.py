"""Command-line face."""
