"""rackmath: the first-principles math of serving and training large language models.

Quick use from Python::

    import rackmath as rm

    dep = rm.deployment("deepseek-v3", "gb200-nvl72")
    grid = rm.decode(dep, batch=[1, 64, 2048], context=[4096])
    grid.step_s, grid.usd_per_million_output_tokens      # NumPy arrays
    rm.explain(dep).to_dict()                            # `rackmath explain --json`, less its text
"""

from __future__ import annotations

import importlib
from typing import Any

# The public names load on first use (PEP 562), so `import rackmath.errors` or
# `rackmath --help` does not pull in NumPy, Pydantic and the catalogs.
_LAZY = {
    "balance": "rackmath.analyses.serving.pooled",
    "decode": "rackmath.api",
    "prefill": "rackmath.api",
    "deployment": "rackmath.api",
    "explain": "rackmath.api",
    "pipeline": "rackmath.api",
    "train": "rackmath.api",
    "plan": "rackmath.api",
    "pareto": "rackmath.api",
    "layout": "rackmath.api",
    "simulate": "rackmath.api",
    "sweep": "rackmath.api",
    "prices": "rackmath.api",
    "fleet": "rackmath.api",
    "overtrain": "rackmath.api",
    "sparsity": "rackmath.api",
    "validate": "rackmath.api",
    "validate_kernels": "rackmath.api",
    "calibrate": "rackmath.api",
    "calibrate_kernels": "rackmath.api",
    "hardware": "rackmath.api",
    "chip": "rackmath.catalog.loader",
    "chips": "rackmath.catalog.loader",
    "model": "rackmath.catalog.loader",
    "models": "rackmath.catalog.loader",
    "resolve_model": "rackmath.catalog.loader",
    "system": "rackmath.catalog.loader",
    "systems": "rackmath.catalog.loader",
    "Efficiency": "rackmath.core.roofline",
    "param_counts": "rackmath.core.architecture",
    "RackmathError": "rackmath.errors",
    "Precision": "rackmath.specs.precision",
    "load_config_file": "rackmath.specs.hf_config",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("rackmath")
        except PackageNotFoundError:  # running from a source tree without installation
            value = "0.0.0+local"
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'rackmath' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Efficiency",
    "Precision",
    "RackmathError",
    "__version__",
    "balance",
    "calibrate",
    "calibrate_kernels",
    "chip",
    "chips",
    "decode",
    "deployment",
    "explain",
    "fleet",
    "hardware",
    "layout",
    "load_config_file",
    "model",
    "models",
    "overtrain",
    "param_counts",
    "pareto",
    "pipeline",
    "plan",
    "prefill",
    "prices",
    "resolve_model",
    "simulate",
    "sparsity",
    "sweep",
    "system",
    "systems",
    "train",
    "validate",
    "validate_kernels",
]
