"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

Only the JSON is read: no modelling code is imported or executed, local or remote.
Each supported ``model_type`` has a reader in ``_FAMILY_READERS``; they share the field
helpers below so a missing or malformed field always produces the same clear message.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rackmath.errors import ConfigError, InputError, UnknownIdError
from rackmath.specs.model import (
    AttentionKind,
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlpKind,
    ModelSpec,
    MoeSpec,
    PublishedCounts,
)
from rackmath.specs.precision import Precision
from rackmath.userfiles import read_text

Config = Mapping[str, Any]

#: Bounds on config.json integers: a layer count bounds the per-layer work of every analysis
#: (the deepest released models have ~100-200 layers); other sizes are far above any model.
MAX_LAYERS = 1024
#: How long a Hub look-up may take before it is reported as unreachable: 4 s, so that the
#: whole command (about 0.4 s of start-up and imports besides) answers within 5 s.
HUB_TIMEOUT_S = 4.0
MAX_FIELD_VALUE = 2**24
FIELD_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "max_window_layers": MAX_LAYERS}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Fields:
    """Typed access to a config dict, with errors that name the field and the family."""

    def __init__(self, config: Config, family: str) -> None:
        self.config = config
        self.family = family

    def _fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"config.json ({self.family}): field {key!r} {problem}")

    def integer(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.config.get(key, default)
        if value is None:
            raise self._fail(key, "is missing; it is required for this model_type")
        maximum = FIELD_MAXIMUM.get(key, MAX_FIELD_VALUE)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, f"must be an integer >= {minimum}, got {_short(value)}")
        if not minimum <= value <= maximum:
            raise self._fail(key, f"must be an integer >= {minimum} and <= {maximum:,}, got {value:,}")
        return value

    def opt_integer(self, key: str, minimum: int = 1) -> int | None:
        if self.config.get(key) is None:
            return None
        return self.integer(key, minimum=minimum)

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            raise self._fail(key, f"must be a list of layer indices, got {value!r}")
        return value


def _native_precision(config: Config) -> Precision:
    """Weight storage format as shipped: a quantization_config wins over torch_dtype."""
    quant = config.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        return Precision.MXFP4
    if method == "fp8" or str(quant.get("fmt", "")).lower().startswith("e4m3"):
        return Precision.FP8
    return _unquantized_precision(config)


def _unquantized_precision(config: Config) -> Precision:
    """The checkpoint's dtype for tensors a quantization leaves alone (``torch_dtype``)."""
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower()
    return {"float16": Precision.FP16, "float32": Precision.FP32}.get(dtype, Precision.BF16)


#: ``modules_to_not_convert`` name segments -> weight classes they keep unconverted. A pattern
#: names a module path (``model.layers.*.self_attn``); its last segments decide the class.
_MODULE_CLASSES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("embed_tokens",), ("embedding",)),
    (("lm_head",), ("lm_head",)),
    (("self_attn",), ("attention",)),
    (("mlp", "router"), ("router",)),
    (("mlp", "gate"), ("router",)),  # DeepSeek / Qwen MoE name the router "gate"
    (("block_sparse_moe", "gate"), ("router",)),  # Mixtral
    (("shared_experts",), ("shared_experts",)),
    (("shared_expert",), ("shared_experts",)),
    (("mlp", "experts"), ("routed_experts",)),
    (("block_sparse_moe", "experts"), ("routed_experts",)),
    (("mlp",), ("dense_mlp", "routed_experts", "shared_experts", "router")),
    (("block_sparse_moe",), ("routed_experts", "router")),
)


def _weight_precision_by_class(config: Config) -> tuple[tuple[tuple[str, Precision], ...], list[str]]:
    """Classes a quantized checkpoint keeps in ``torch_dtype`` (``quantization_config.
    modules_to_not_convert``), and notes on patterns that name no whole class.

    gpt-oss: ``["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
    "lm_head"]`` -> attention, router, embedding and LM head in bf16; the experts (and the
    norms, which no quantizer converts) follow. A pattern for one layer only
    (``model.layers.3.mlp``) cannot be a class and is reported, not guessed.
    """
    quant = config.get("quantization_config") or {}
    if not isinstance(quant, Mapping):
        return (), []
    patterns = quant.get("modules_to_not_convert") or []
    if not isinstance(patterns, list):
        raise ConfigError(
            f"config.json: quantization_config.modules_to_not_convert must be a list, got {patterns!r}"
        )
    keep = _unquantized_precision(config)
    classes: dict[str, Precision] = {}
    notes: list[str] = []
    for pattern in patterns:
        parts = [p for p in str(pattern).split(".") if p]
        if parts[:1] == ["model"]:
            parts = parts[1:]
        per_layer = len(parts) >= 2 and parts[0] == "layers"
        if per_layer and parts[1] != "*":
            notes.append(
                f"modules_to_not_convert {pattern!r} names one layer; counted at the quantized precision"
            )
            continue
        tail = tuple(parts[2:] if per_layer else parts)
        for segments, names in _MODULE_CLASSES:
            if tail == segments:
                classes.update(dict.fromkeys(names, keep))
                break
        else:
            notes.append(f"modules_to_not_convert {pattern!r} names no weight class; ignored")
    if quant.get("quant_method") and classes:
        classes.setdefault("norms", keep)
    return tuple(sorted(classes.items())), notes


def _standard_attention(f: _Fields, qkv_bias: bool, output_bias: bool, **extra: Any) -> AttentionSpec:
    hidden = f.integer("hidden_size")
    heads = f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise f._fail("num_key_value_heads", f"must divide num_attention_heads ({heads}), got {kv_heads}")
    head_dim = f.config.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise f._fail(
                "head_dim", f"is missing and hidden_size {hidden} is not divisible by {heads} heads"
            )
        head_dim = hidden // heads
    head_dim = f.integer("head_dim", default=head_dim)
    kind = (
        AttentionKind.MHA if kv_heads == heads else AttentionKind.MQA if kv_heads == 1 else AttentionKind.GQA
    )
    return AttentionSpec(
        kind=kind,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=qkv_bias,
        output_bias=output_bias,
        **extra,
    )


def _mla_attention(f: _Fields) -> AttentionSpec:
    heads = f.integer("num_attention_heads")
    nope = f.integer("qk_nope_head_dim")
    rope = f.integer("qk_rope_head_dim")
    return AttentionSpec(
        kind=AttentionKind.MLA,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        v_head_dim=f.integer("v_head_dim"),
        qkv_bias=f.flag("attention_bias", False),
        q_lora_rank=f.opt_integer("q_lora_rank"),
        kv_lora_rank=f.integer("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
    )


def _windows(f: _Fields, num_layers: int) -> list[int | None]:
    """Per-layer attention window from whichever convention the family uses."""
    window = f.opt_integer("sliding_window")
    layer_types = f.config.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise f._fail("layer_types", f"must list one type per layer ({num_layers})")
        unknown = set(layer_types) - {"sliding_attention", "full_attention"}
        if unknown:
            raise f._fail("layer_types", f"has unknown types {sorted(unknown)}")
        if window is None and "sliding_attention" in layer_types:
            raise f._fail("sliding_window", "is missing but layer_types has sliding layers")
        return [window if t == "sliding_attention" else None for t in layer_types]
    if window is None:
        return [None] * num_layers
    pattern = f.config.get("sliding_window_pattern")
    if pattern is not None:  # Gemma: every pattern-th layer is global
        period = f.integer("sliding_window_pattern")
        return [None if (i + 1) % period == 0 else window for i in range(num_layers)]
    if "use_sliding_window" in f.config:  # Qwen: sliding only from max_window_layers on
        if not f.flag("use_sliding_window", False):
            return [None] * num_layers
        start = f.integer("max_window_layers", default=0, minimum=0)
        return [window if i >= start else None for i in range(num_layers)]
    return [window] * num_layers  # Mistral: every layer


def _layers(windows: list[int | None], is_moe: Callable[[int], bool]) -> tuple[LayerSpec, ...]:
    return tuple(
        LayerSpec(window=w, mlp=MlpKind.MOE if is_moe(i) else MlpKind.DENSE) for i, w in enumerate(windows)
    )


def _read_llama(f: _Fields) -> dict[str, Any]:
    """llama, mistral, qwen2, qwen3: dense decoder with a gated MLP."""
    qwen2 = f.family == "qwen2"
    n = f.integer("num_hidden_layers")
    attention = _standard_attention(
        f,
        qkv_bias=qwen2 or f.flag("attention_bias", False),
        output_bias=f.flag("attention_bias", False),
        qk_norm=f.family == "qwen3",
    )
    return {
        "attention": attention,
        "layers": _layers(_windows(f, n), lambda i: False),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size"), bias=f.flag("mlp_bias", False)),
        "moe": None,
    }


def _read_mixtral(f: _Fields) -> dict[str, Any]:
    n = f.integer("num_hidden_layers")
    return {
        "attention": _standard_attention(f, qkv_bias=False, output_bias=False),
        "layers": _layers(_windows(f, n), lambda i: True),
        "dense_mlp": None,
        "moe": MoeSpec(
            num_experts=f.integer("num_local_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=f.integer("intermediate_size"),
        ),
    }


def _read_qwen_moe(f: _Fields) -> dict[str, Any]:
    """qwen2_moe / qwen3_moe: MoE every decoder_sparse_step layers, except mlp_only_layers."""
    n = f.integer("num_hidden_layers")
    step = f.integer("decoder_sparse_step", default=1)
    dense_only = set(f.int_list("mlp_only_layers"))
    shared = f.integer("shared_expert_intermediate_size", default=0, minimum=0)
    return {
        "attention": _standard_attention(
            f,
            qkv_bias=f.family == "qwen2_moe" or f.flag("attention_bias", False),
            output_bias=False,
            qk_norm=f.family == "qwen3_moe",
        ),
        "layers": _layers(_windows(f, n), lambda i: i not in dense_only and (i + 1) % step == 0),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": MoeSpec(
            num_experts=f.integer("num_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=f.integer("moe_intermediate_size"),
            num_shared_experts=1 if shared else 0,
            shared_intermediate_size=shared,
        ),
    }


def _read_deepseek(f: _Fields) -> dict[str, Any]:
    """deepseek_v3 / kimi_k2 (MLA) and glm4_moe (GQA): leading dense layers, then MoE."""
    n = f.integer("num_hidden_layers")
    first_moe = f.integer("first_k_dense_replace", default=0, minimum=0)
    freq = f.integer("moe_layer_freq", default=1)
    mla = "kv_lora_rank" in f.config
    attention = (
        _mla_attention(f)
        if mla
        else _standard_attention(
            f,
            qkv_bias=f.flag("attention_bias", False),
            output_bias=False,
            qk_norm=f.flag("use_qk_norm", False),
        )
    )
    shared = f.integer("n_shared_experts", default=0, minimum=0)
    expert_width = f.integer("moe_intermediate_size")
    return {
        "attention": attention,
        "layers": _layers(_windows(f, n), lambda i: i >= first_moe and i % freq == 0),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": MoeSpec(
            num_experts=f.integer("n_routed_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=expert_width,
            num_shared_experts=shared,
            shared_intermediate_size=shared * expert_width,
            router_bias=f.config.get("topk_method") == "noaux_tc" or f.family == "glm4_moe",
        ),
        "num_mtp_layers": f.integer("num_nextn_predict_layers", default=0, minimum=0),
    }


def _read_gpt_oss(f: _Fields) -> dict[str, Any]:
    n = f.integer("num_hidden_layers")
    return {
        "attention": _standard_attention(f, qkv_bias=True, output_bias=True, sinks=True),
        "layers": _layers(_windows(f, n), lambda i: True),
        "dense_mlp": None,
        "moe": MoeSpec(
            num_experts=f.integer("num_local_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=f.integer("intermediate_size"),
            expert_bias=True,
            router_bias=True,
        ),
    }


def _read_gemma3(f: _Fields) -> dict[str, Any]:
    n = f.integer("num_hidden_layers")
    return {
        "attention": _standard_attention(f, qkv_bias=False, output_bias=False, qk_norm=True),
        "layers": _layers(_windows(f, n), lambda i: False),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": None,
        "norms_per_layer": 4,  # pre/post attention and pre/post feed-forward
    }


_FAMILY_READERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "llama": _read_llama,
    "mistral": _read_llama,
    "qwen2": _read_llama,
    "qwen3": _read_llama,
    "mixtral": _read_mixtral,
    "qwen2_moe": _read_qwen_moe,
    "qwen3_moe": _read_qwen_moe,
    "deepseek_v3": _read_deepseek,
    "kimi_k2": _read_deepseek,
    "glm4_moe": _read_deepseek,
    "gpt_oss": _read_gpt_oss,
    "gemma3": _read_gemma3,
    "gemma3_text": _read_gemma3,
}

SUPPORTED_FAMILIES = tuple(sorted(_FAMILY_READERS))

_TIED_BY_DEFAULT = {"gemma3", "gemma3_text"}


def model_from_config(
    config: Config,
    *,
    model_id: str,
    name: str | None = None,
    aliases: tuple[str, ...] = (),
    published: PublishedCounts | None = None,
    source: tuple[str, ...] = (),
    date: str = "",
    confidence: str = "",
    notes: tuple[str, ...] = (),
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed ``config.json`` mapping."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"config.json must be a JSON object, got {type(config).__name__}")
    family = config.get("model_type")
    if not isinstance(family, str):
        raise ConfigError(
            "config.json: field 'model_type' is missing; allowed: " + ", ".join(SUPPORTED_FAMILIES)
        )
    if family == "gemma3" and isinstance(config.get("text_config"), Mapping):
        config = {**config["text_config"], "torch_dtype": config.get("torch_dtype")}
    reader = _FAMILY_READERS.get(family)
    if reader is None:
        raise UnknownIdError("model_type", family, SUPPORTED_FAMILIES)
    f = _Fields(config, family)
    parts = reader(f)
    moe = parts.get("moe")
    if moe is not None and moe.experts_per_token > moe.num_experts:
        raise f._fail(
            "num_experts_per_tok",
            f"must be at most the number of routed experts ({moe.num_experts}), got {moe.experts_per_token}",
        )
    context = config.get("max_position_embeddings")
    by_class, class_notes = _weight_precision_by_class(config)
    return ModelSpec(
        id=model_id,
        name=name or model_id,
        family=family,
        hidden_size=f.integer("hidden_size"),
        vocab_size=f.integer("vocab_size"),
        tie_word_embeddings=f.flag("tie_word_embeddings", family in _TIED_BY_DEFAULT),
        native_weight_precision=_native_precision(config),
        weight_precision_by_class=by_class,
        max_context=context if isinstance(context, int) and context > 0 else None,
        aliases=aliases,
        published=published,
        source=source,
        date=date,
        confidence=confidence,
        notes=tuple(notes) + tuple(class_notes),
        **parts,
    )


def load_config_file(path: str | Path, model_id: str | None = None) -> ModelSpec:
    """Read a local ``config.json``; the model id defaults to the parent folder's name."""
    path = Path(path)
    try:
        text = read_text(path, "config.json")
    except InputError as exc:
        raise ConfigError(f"cannot read {path} as config.json: {exc.allowed}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise ConfigError(f"{path} is nested too deeply to be a config.json") from None
    default_id = path.parent.name if path.name == "config.json" else path.stem
    return model_from_config(config, model_id=model_id or default_id, source=(str(path),))


def load_config_from_hub(
    repo_id: str, revision: str | None = None, *, timeout_s: float = HUB_TIMEOUT_S
) -> ModelSpec:
    """Download only ``config.json`` of a Hub repository (needs the ``hub`` extra and a network).

    Gives up after ``timeout_s`` seconds with a one-line :class:`ConfigError`.
    """
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ConfigError(
            "reading from the Hugging Face Hub needs the hub extra: pip install 'rackmath[hub]'"
        ) from None
    # the Hub client logs each retry as a warning; the one-line ConfigError below says it all
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)
    outcome: dict[str, Any] = {}

    def fetch() -> None:
        try:
            outcome["path"] = hf_hub_download(
                repo_id, "config.json", revision=revision, etag_timeout=timeout_s
            )
        except Exception as exc:  # network, auth, missing repo: all reported the same way
            outcome["error"] = exc

    # The client retries for tens of seconds when offline; a daemon thread bounds the wait
    # (it is abandoned, not joined, if the deadline passes).
    worker = threading.Thread(target=fetch, name="rackmath-hub-fetch", daemon=True)
    try:
        worker.start()
        worker.join(timeout_s)
    finally:
        hub_log.setLevel(level)
    if worker.is_alive():
        raise ConfigError(
            f"could not fetch config.json of {repo_id!r} from the Hub within {timeout_s:g} s "
            "(offline?); download it and pass its path instead"
        )
    if "error" in outcome:
        reason = " ".join(str(outcome["error"]).split())  # one line, whatever the client's message holds
        raise ConfigError(f"could not fetch config.json of {repo_id!r} from the Hub: {reason}")
    path = outcome["path"]
    spec = load_config_file(path, model_id=repo_id.split("/")[-1].lower())
    return spec
