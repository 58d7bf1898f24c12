"""Kernels: measured kernel tables as operator rows, the per-operator efficiency fit, its bands
and held-out validation, the catalog document it writes, and the fitted tables as the
operator model reads them (tables)."""
