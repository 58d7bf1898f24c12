"""One reader per Hugging Face ``model_type``, grouped by family (see each module).

``FAMILY_READERS`` maps a ``model_type`` to a function of :class:`~.fields.Fields` that
returns the :class:`~rackmath.specs.model.ModelSpec` fields particular to that family;
:func:`unwrap` first lifts a multimodal config's text tower, or renames a family's own
field names to the standard ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rackmath.errors import ConfigError
from rackmath.specs.hf_readers import classic, hybrid
from rackmath.specs.hf_readers.fields import Config, Fields

FAMILY_READERS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    **classic.READERS,
    "llama4": hybrid.read_llama4,
    "llama4_text": hybrid.read_llama4,
    "qwen3_next": hybrid.read_qwen3_next,
    "mpt": hybrid.read_mpt,
    "nemotron-nas": hybrid.read_nemotron_nas,
}

#: Families whose LM head is the embedding unless the config says otherwise.
TIED_BY_DEFAULT = frozenset({"gemma3", "gemma3_text", "mpt"})

#: Multimodal configs whose language model lives under ``text_config``.
_TEXT_TOWER = frozenset({"gemma3", "llama4"})

#: Wrapper fields of a ``kimi_k25`` config that override its text tower's (:func:`unwrap`).
_KIMI_LIFTED = ("torch_dtype", "dtype", "tie_word_embeddings", "quantization_config")


def unwrap(family: str, config: Config) -> Config:
    """The text tower of a multimodal config (the top-level dtype kept), or MPT's fields
    under their standard names; any other config unchanged.

    ``kimi_k25`` (Kimi K2.5 / K2.6, ``KimiK25ForConditionalGeneration``) wraps a DeepSeek-V3
    style text config under ``text_config`` beside a MoonViT vision tower; the text tower is
    lifted with the wrapper's dtype (``dtype`` in transformers 5 configs), its
    ``tie_word_embeddings`` and its ``quantization_config`` (the wrapper repeats the text
    tower's). The vision tower (~0.4B parameters) is not modelled.
    """
    if family == "kimi_k25":
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise ConfigError(
                "config.json: field 'text_config' is missing; a kimi_k25 config holds its "
                "language model (a DeepSeek-V3 style config) under text_config"
            )
        lifted = {key: config[key] for key in _KIMI_LIFTED if key in config}
        return {**text, **lifted, "model_type": family}
    if family in _TEXT_TOWER and isinstance(config.get("text_config"), Mapping):
        text = config["text_config"]
        return {**text, "torch_dtype": config.get("torch_dtype") or text.get("torch_dtype")}
    if family == "mpt":
        renamed = {hybrid.MPT_FIELD_NAMES.get(k, k): v for k, v in config.items()}
        return renamed
    return config
