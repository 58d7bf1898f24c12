"""rackmath: the first-principles math of serving and training large language models.

Quick use from Python::

    import rackmath as rm

    dep = rm.deployment("deepseek-v3", "gb200-nvl72")
    grid = rm.decode(dep, batch=[1, 64, 2048], context=[4096])
    grid.step_s, grid.usd_per_million_output_tokens      # NumPy arrays
    rm.explain(dep).to_dict()                            # the `rackmath explain --json` object
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rackmath")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

from rackmath.analyses.serving import balance, decode, prefill
from rackmath.api import deployment, explain, pipeline, train
from rackmath.catalog import chip, chips, model, models, resolve_model, system, systems
from rackmath.core import Efficiency, param_counts
from rackmath.errors import RackmathError
from rackmath.specs import Precision, load_config_file

__all__ = [
    "Efficiency",
    "Precision",
    "RackmathError",
    "__version__",
    "balance",
    "chip",
    "chips",
    "decode",
    "deployment",
    "explain",
    "load_config_file",
    "model",
    "models",
    "param_counts",
    "pipeline",
    "prefill",
    "resolve_model",
    "system",
    "systems",
    "train",
]
