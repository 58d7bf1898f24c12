"""Read a Hugging Face ``config.json`` into a :class:`ModelSpec`.

Only the JSON is read: no modelling code is imported or executed, local or remote.
Each supported ``model_type`` has a reader in :mod:`rackmath.specs.hf_readers` (one module per
group of families); they share the field helpers of :mod:`rackmath.specs.hf_readers.fields`
so a missing or malformed field always produces the same clear message.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rackmath.errors import ConfigError, InputError, UnknownIdError
from rackmath.specs.hf_readers import FAMILY_READERS, TIED_BY_DEFAULT, unwrap
from rackmath.specs.hf_readers.fields import Config, Fields
from rackmath.specs.model import WEIGHT_CLASSES, ModelSpec, PublishedCounts
from rackmath.specs.precision import ALIASES, FORMATS, Precision
from rackmath.userfiles import read_text

#: How long a Hub look-up may take before it is reported as unreachable: 4 s, so that the
#: whole command (about 0.4 s of start-up and imports besides) answers within 5 s.
HUB_TIMEOUT_S = 4.0


def _native_precision(config: Config) -> Precision:
    """Weight storage format as shipped: a quantization_config wins over torch_dtype.

    ``quant_method: fp8`` with a ``weight_block_size`` is block-scaled FP8 (DeepSeek-V3,
    Kimi K2: 128 x 128 blocks), without one per-tensor FP8; ``mxfp4`` is OCP MXFP4 (gpt-oss);
    ``modelopt`` names its algorithm in ``quant_algo`` (``NVFP4``, ``FP8``, ``W4A8_MXFP4_FP8``
    ...: NVIDIA TensorRT Model Optimizer's ``hf_quant_config``), the checkpoints NVIDIA
    publishes as ``*-FP4`` and ``*-FP8``.
    """
    quant = config.get("quantization_config") or {}
    if not isinstance(quant, Mapping):
        return _unquantized_precision(config)
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        return Precision.MXFP4
    if method == "modelopt":
        if _is_mixed(quant):
            return _mixed_precision_classes(config, quant)[0]
        return _modelopt_format(quant.get("quant_algo"), "quantization_config.quant_algo")
    if method == "fp8" or str(quant.get("fmt", "")).lower().startswith("e4m3"):
        return Precision.FP8_BLOCK if quant.get("weight_block_size") else Precision.FP8
    if method == "compressed-tensors":
        by_group = _ct_class_formats(quant)
        first = _compressed_tensors_format(quant)[0]
        return next((by_group[c] for c in ("routed_experts", "dense_mlp") if c in by_group), first)
    return _unquantized_precision(config)


def _modelopt_format(algo: Any, where: str) -> Precision:
    """A ModelOpt ``quant_algo`` as a storage format: ``NVFP4`` (also ``W4A16_NVFP4``,
    ``NVFP4_AWQ``), ``MXFP4`` (``W4A8_MXFP4_FP8``), ``FP8`` (``FP8_BLOCKWISE``, ``FP8_PB_WO``:
    block-scaled); anything else refused in one line naming the field."""
    text = str(algo or "").upper()
    if "NVFP4" in text:
        return Precision.NVFP4
    if "MXFP4" in text:
        return Precision.MXFP4
    if "FP8" in text:
        return Precision.FP8_BLOCK if ("BLOCK" in text or "_PB" in text) else Precision.FP8
    raise ConfigError(
        f"config.json: {where} {algo!r} is not a format rackmath reads "
        "(NVFP4, FP8, FP8_BLOCKWISE, W4A8_MXFP4_FP8, MIXED_PRECISION)"
    )


def _is_mixed(quant: Mapping[str, Any]) -> bool:
    return str(quant.get("quant_algo", "")).upper() == "MIXED_PRECISION"


def _module_class(name: str) -> str | None:
    """The weight class of one module path (``model.layers.3.mlp.experts.7.down_proj`` ->
    ``routed_experts``), or None for a path that names none."""
    parts = [p for p in name.split(".") if p]
    if "embed_tokens" in parts:
        return "embedding"
    if "lm_head" in parts:
        return "lm_head"
    if "self_attn" in parts:
        return "attention"
    if "shared_experts" in parts or "shared_expert" in parts:
        return "shared_experts"
    if "experts" in parts:
        return "routed_experts"
    if "mlp" in parts or "block_sparse_moe" in parts:
        return "router" if parts[-1] in ("gate", "router") else "dense_mlp"
    return None


def _mixed_precision_classes(
    config: Config, quant: Mapping[str, Any]
) -> tuple[Precision, tuple[tuple[str, Precision], ...], list[str]]:
    """A ModelOpt ``MIXED_PRECISION`` checkpoint: ``quantized_layers`` gives each quantized
    module its ``quant_algo`` (ModelOpt's per-layer export, NVIDIA's mixed NVFP4/FP8
    checkpoints); a class takes its modules' format (the most common, where they differ,
    with a note), a class with no module listed keeps ``torch_dtype``. The native format is the
    routed experts' (else the dense MLP's, else the attention's): the weights the model mostly
    holds. ``(native, by_class, notes)``."""
    layers = quant.get("quantized_layers")
    if not isinstance(layers, Mapping) or not layers:
        raise ConfigError(
            "config.json: quantization_config.quantized_layers (module -> quant_algo) is missing "
            "(quant_algo MIXED_PRECISION)"
        )
    found: dict[str, dict[Precision, int]] = {}
    notes: list[str] = []
    for module, spec in layers.items():
        algo = spec.get("quant_algo") if isinstance(spec, Mapping) else spec
        fmt = _modelopt_format(algo, f"quantization_config.quantized_layers[{module!r}].quant_algo")
        cls = _module_class(str(module))
        if cls is None:
            continue
        counts = found.setdefault(cls, {})
        counts[fmt] = counts.get(fmt, 0) + 1
    classes: dict[str, Precision] = {}
    for cls, counts in found.items():
        classes[cls] = max(counts, key=lambda f: counts[f])
        if len(counts) > 1:
            mix = ", ".join(f"{n} {f.value}" for f, n in counts.items())
            notes.append(f"{cls} modules in several formats ({mix}); counted as {classes[cls].value}")
    keep = _unquantized_precision(config)
    native = next((classes[c] for c in ("routed_experts", "dense_mlp", "attention") if c in classes), keep)
    every = {c: classes.get(c, keep) for c in WEIGHT_CLASSES}
    return native, tuple(sorted((c, f) for c, f in every.items() if f is not native)), notes


def _kv_precision(config: Config) -> Precision | None:
    """The KV cache's format where the quantization config states one: ModelOpt's
    ``kv_cache_quant_algo`` (``FP8``, ``NVFP4``) or a ``kv_cache_scheme`` of compressed-tensors
    and ModelOpt (``num_bits 8, type float`` -> fp8; ``8 int`` -> int8); None where it says
    nothing (``kv_cache_scheme: null``): the KV then defaults to bf16."""
    quant = config.get("quantization_config") or {}
    if not isinstance(quant, Mapping):
        return None
    algo = quant.get("kv_cache_quant_algo")
    if algo:
        fmt = _modelopt_format(algo, "quantization_config.kv_cache_quant_algo")
        return Precision.FP8 if fmt is Precision.FP8_BLOCK else fmt
    scheme = quant.get("kv_cache_scheme")
    if not isinstance(scheme, Mapping):
        return None
    bits, kind = scheme.get("num_bits"), str(scheme.get("type", "")).lower()
    formats = {(8, "float"): Precision.FP8, (8, "int"): Precision.INT8}
    kv = formats.get((bits, kind))  # type: ignore[arg-type]
    if kv is None:
        raise ConfigError(
            f"config.json: quantization_config.kv_cache_scheme of {bits} bits, type {kind!r}, is not a "
            "KV format rackmath reads (8-bit float or int)"
        )
    return kv


def _compressed_tensors_format(quant: Mapping[str, Any]) -> tuple[Precision, int | None]:
    """``(weight format, group size)`` of a ``compressed-tensors`` quantization config (vLLM's
    llm-compressor format): the weights of its first config group. Kimi K2.5: ``num_bits 4``,
    ``type int``, ``strategy group``, ``group_size 32`` -> int4. Formats rackmath does not
    store (other bit widths) are refused in one line."""
    groups = _ct_groups(quant)
    return _group_format(groups[sorted(groups)[0]])


def _ct_groups(quant: Mapping[str, Any]) -> Mapping[str, Any]:
    groups = quant.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError("config.json: quantization_config.config_groups is missing (compressed-tensors)")
    return groups


def _group_format(entry: Any) -> tuple[Precision, int | None]:
    """``(weight format, group size)`` of one compressed-tensors config group."""
    weights = entry.get("weights") if isinstance(entry, Mapping) else None
    if not isinstance(weights, Mapping):
        raise ConfigError("config.json: quantization_config.config_groups has no weights entry")
    bits, kind = weights.get("num_bits"), str(weights.get("type", "")).lower()
    group = weights.get("group_size")
    group = group if isinstance(group, int) and not isinstance(group, bool) else None
    formats = {
        (4, "int"): Precision.INT4,
        (8, "int"): Precision.INT8,
        (8, "float"): Precision.FP8_BLOCK if weights.get("strategy") == "block" else Precision.FP8,
        (4, "float"): Precision.NVFP4 if group == 16 else Precision.MXFP4,
    }
    fmt = formats.get((bits, kind))  # type: ignore[arg-type]
    if fmt is None:
        raise ConfigError(
            f"config.json: compressed-tensors weights of {bits} bits, type {kind!r}, are not a format "
            "rackmath reads (4-bit int or float, 8-bit int or float)"
        )
    return fmt, group


def _unquantized_precision(config: Config) -> Precision:
    """The checkpoint's dtype for tensors a quantization leaves alone (``torch_dtype``)."""
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower()
    fmt = FORMATS.get(ALIASES.get(dtype, dtype))  # the torch names are the format table's
    return fmt.weights if fmt is not None and fmt.weights.is_wide else Precision.BF16


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
    if str(quant.get("quant_method", "")).lower() == "compressed-tensors":
        return _compressed_tensors_classes(config, quant)
    if str(quant.get("quant_method", "")).lower() == "modelopt" and _is_mixed(quant):
        _, by_class, mixed_notes = _mixed_precision_classes(config, quant)
        return by_class, mixed_notes
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
    if quant.get("quant_method") and not patterns:
        # No list: the quantizer converted the Linear layers of attention and MLPs only. The
        # embedding, LM head, router and norms keep torch_dtype: DeepSeek-V3's FP8 checkpoint
        # holds scales (weight_scale_inv) for its quantized Linear layers only, and its
        # inference code builds the head and the gate in the default dtype (deepseek-ai/
        # DeepSeek-V3 inference/model.py: ``ColumnParallelLinear(dim, vocab,
        # dtype=torch.get_default_dtype())``, ``Gate.weight = nn.Parameter(...)``); ModelOpt
        # excludes the LM head by default (``hf_quant_config.json`` exclude_modules).
        classes.update(dict.fromkeys(UNQUANTIZED_BY_DEFAULT, keep))
    if quant.get("quant_method") and classes:
        classes.setdefault("norms", keep)
    return tuple(sorted(classes.items())), notes


#: Module names standing for each weight class of a compressed-tensors checkpoint (the
#: DeepSeek / Llama / Qwen layout): a class is left unquantized when every one of its names is
#: matched by the config's ``ignore`` list. Embedding, router and norms are not ``Linear``
#: modules (compressed-tensors targets ``Linear``) and keep ``torch_dtype``.
_CT_CLASS_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.o_proj")),
    ("dense_mlp", ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj")),
    (
        "shared_experts",
        ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_experts.down_proj"),
    ),
    ("routed_experts", ("model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.down_proj")),
    ("lm_head", ("lm_head",)),
)
#: compressed-tensors' int4 group size that rackmath's int4 stores (one FP16 scale per 128).
_INT4_GROUP = 128


def _ignored(name: str, patterns: list[str]) -> bool:
    """Whether compressed-tensors' ``ignore`` list skips module ``name``: ``re:`` patterns
    match from the start of the name, plain ones name the module or its last segments."""
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif name == pattern or name.endswith("." + pattern):
            return True
    return False


def _targets(entry: Any) -> list[str]:
    targets = entry.get("targets") if isinstance(entry, Mapping) else None
    return [str(t) for t in targets] if isinstance(targets, list) else ["Linear"]


def _ct_class_formats(quant: Mapping[str, Any]) -> dict[str, Precision]:
    """Each class's format where a compressed-tensors checkpoint quantizes classes apart
    (several ``config_groups``, each with its ``targets``: ``re:.*mlp\\.experts.*`` in NVFP4
    beside ``re:.*self_attn.*`` in FP8): a class takes the group whose targets name its
    modules (:data:`_CT_CLASS_MODULES`), else the group targeting every ``Linear``. Empty
    with one group (it covers every class)."""
    groups = _ct_groups(quant)
    if len(groups) < 2:
        return {}
    out: dict[str, Precision] = {}
    for cls, names in _CT_CLASS_MODULES:
        named = [
            g for g in sorted(groups) if _ignored(names[0], [t for t in _targets(groups[g]) if t != "Linear"])
        ]
        every = [g for g in sorted(groups) if "Linear" in _targets(groups[g])]
        chosen = named or every
        if chosen:
            out[cls] = _group_format(groups[chosen[0]])[0]
    return out


def _compressed_tensors_classes(
    config: Config, quant: Mapping[str, Any]
) -> tuple[tuple[tuple[str, Precision], ...], list[str]]:
    """Weight classes a compressed-tensors checkpoint keeps in ``torch_dtype``: those its
    ``ignore`` list names (:data:`_CT_CLASS_MODULES`), plus embedding, router and norms.
    Kimi K2.5 ignores ``lm_head``, ``re:.*self_attn.*``, ``re:.*shared_experts.*`` and
    ``re:.*mlp\\.(gate|up|gate_up|down)_proj.*``: only the routed experts are int4."""
    ignore = quant.get("ignore") or []
    if not isinstance(ignore, list):
        raise ConfigError(f"config.json: quantization_config.ignore must be a list, got {ignore!r}")
    patterns = [str(p) for p in ignore]
    keep = _unquantized_precision(config)
    classes = {cls: keep for cls, names in _CT_CLASS_MODULES if all(_ignored(n, patterns) for n in names)}
    classes.update(dict.fromkeys(("embedding", "router", "norms"), keep))
    native = _native_precision(config)
    by_group = _ct_class_formats(quant)
    if by_group:  # several groups: each class its own group's format, none targeted: torch_dtype
        for cls, _ in _CT_CLASS_MODULES:
            fmt = by_group.get(cls, keep)
            if cls not in classes and fmt is not native:
                classes[cls] = fmt
    fmt, group = _compressed_tensors_format(quant)
    notes = []
    if fmt is Precision.INT4 and group not in (None, _INT4_GROUP):
        notes.append(
            f"int4 weights with one scale per {group} (compressed-tensors) are counted as rackmath's "
            f"int4, one scale per {_INT4_GROUP}: {4 + 16 / _INT4_GROUP:g} bits a weight instead of "
            f"{4 + 16 / group:g}"
        )
    return tuple(sorted(classes.items())), notes


#: Weight classes a quantized checkpoint keeps in ``torch_dtype`` when its config lists no
#: ``modules_to_not_convert`` (see :func:`_weight_precision_by_class`).
UNQUANTIZED_BY_DEFAULT = ("embedding", "lm_head", "router", "norms")


SUPPORTED_FAMILIES = tuple(sorted(FAMILY_READERS))


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
    config = unwrap(family, config)
    reader = FAMILY_READERS.get(family)
    if reader is None:
        raise UnknownIdError("model_type", family, SUPPORTED_FAMILIES)
    f = Fields(config, family)
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
        tie_word_embeddings=f.flag("tie_word_embeddings", family in TIED_BY_DEFAULT),
        native_weight_precision=_native_precision(config),
        weight_precision_by_class=by_class,
        native_kv_precision=_kv_precision(config),
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
