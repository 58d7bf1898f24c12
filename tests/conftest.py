from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
