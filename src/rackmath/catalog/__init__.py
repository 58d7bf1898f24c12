"""The embedded catalogs: chips, systems and models, loaded once and validated."""

from rackmath.catalog.loader import (
    chip,
    chips,
    model,
    models,
    resolve_model,
    system,
    systems,
)

__all__ = ["chip", "chips", "model", "models", "resolve_model", "system", "systems"]
