"""Typed, immutable specs: what the catalogs and config files are parsed into."""

from rackmath.specs.hardware import ChipSpec, DatedPrice, SystemSpec
from rackmath.specs.hf_config import (
    SUPPORTED_FAMILIES,
    load_config_file,
    load_config_from_hub,
    model_from_config,
)
from rackmath.specs.model import (
    ActiveCountRule,
    AttentionKind,
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlpKind,
    ModelSpec,
    MoeSpec,
    PublishedCounts,
)
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision

__all__ = [
    "SUPPORTED_FAMILIES",
    "ActiveCountRule",
    "AttentionKind",
    "AttentionSpec",
    "ChipSpec",
    "DatedPrice",
    "DenseMlpSpec",
    "LayerSpec",
    "MlpKind",
    "ModelSpec",
    "MoeSpec",
    "ParallelPlan",
    "Precision",
    "PublishedCounts",
    "SystemSpec",
    "load_config_file",
    "load_config_from_hub",
    "model_from_config",
]
