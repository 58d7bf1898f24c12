"""The blackboard derivation of an :class:`~rackmath.analyses.serving.explain.Explanation` as text:
sections of plain lines, written once here and drawn by every face (the CLI prints them, the
web page lists them, ``explain --json`` carries them under ``derivation``: :func:`explanation_dict`).

The result does not format itself: it holds numbers; this module writes them as text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rackmath.analyses.serving import pooled
from rackmath.core import architecture as arch
from rackmath.views import fmt

if TYPE_CHECKING:
    from rackmath.analyses.serving.explain import Explanation
    from rackmath.analyses.serving.prefix import PrefixPrefill


@dataclass(frozen=True)
class Section:
    """A titled block of the derivation: ``title`` (with an optional ``subtitle`` in plain
    words) and one equation or statement per line."""

    key: str
    title: str
    lines: tuple[str, ...]
    subtitle: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "subtitle": self.subtitle, "lines": list(self.lines)}


def explanation_dict(result: Explanation) -> dict[str, Any]:
    """The ``rackmath explain --json`` object: the result's ``to_dict()`` with the derivation's
    sections (:func:`derivation`, then :func:`feature_sections`) under ``derivation``, after
    ``assumptions``."""
    sections = [s.to_dict() for s in (*derivation(result), *feature_sections(result))]
    out: dict[str, Any] = {}
    for key, value in result.to_dict().items():
        out[key] = value
        if key == "assumptions":
            out["derivation"] = sections
    return out


def derivation(result: Explanation) -> tuple[Section, ...]:
    """Every section in reading order (the decode table, operators and plan come after)."""
    return (
        _model(result),
        _hardware(result),
        _step(result),
        _floor(result),
        _balance(result),
        _memory(result),
        _prefill(result),
    )


def feature_sections(result: Explanation) -> tuple[Section, ...]:
    """The optional serving features (speculative decoding, prefix caching, energy)."""
    out = []
    if result.speculative is not None:
        out.append(_speculative(result))
    if result.prefix is not None:
        out.append(_prefix(result))
    if result.energy is not None:
        out.append(_energy(result))
    else:
        chip = result.deployment.system.chip.id
        out.append(
            Section("energy", "Energy", (f"{chip} has no published TDP, so no joules per token are shown",))
        )
    return tuple(out)


def _model(result: Explanation) -> Section:
    d = result.deployment
    m, p = d.model, d.params
    moe = m.moe
    routing = (
        f"; {moe.experts_per_token} of {moe.num_experts} routed experts per token"
        + (f" + {moe.num_shared_experts} shared" if moe.num_shared_experts else "")
        + f" in {m.num_moe_layers} of {m.num_layers} layers"
        if m.is_moe and moe
        else ""
    )
    kv_tok = arch.kv_bytes_per_token(m, d.precisions.kv.bytes_per_element)
    kv_layers = arch.kv_cache_layers(m)  # hybrid and NAS models cache KV in some layers only
    state = arch.state_bytes_per_sequence(m, d.precisions.kv.bytes_per_element)
    return Section(
        "model",
        "The model",
        (
            f"N_total = {fmt.count(p.total)} parameters, N_active = {fmt.count(p.active)} per token{routing}",
            f"KV cache: {m.attention.kind.value}, "
            f"{arch.kv_elements_per_token_per_layer(m.attention)} values/token/layer x {kv_layers} layers "
            f"x {d.precisions.kv.bytes_per_element:g} B = {fmt.nbytes(kv_tok)} per token"
            + (" (sliding-window layers stop at their window)" if any(x.window for x in m.layers) else "")
            + (f" + a fixed {fmt.nbytes(state)} state per sequence" if state else ""),
            f"precisions: weights {d.precisions.weights.value} "
            f"({d.precisions.weights.bytes_per_element:g} B), "
            f"KV {d.precisions.kv.value}, compute {d.precisions.compute.value}"
            + (
                f" ({m.stated_weight_classes}; each GEMM on its own weights' kernel)"
                if m.stated_weight_classes
                else ""
            ),
        ),
    )


def _hardware(result: Explanation) -> Section:
    d = result.deployment
    chip = d.system.chip
    F, BW = d.peak_flops_per_s, d.bandwidth_bytes_per_s
    listed = chip.price_usd_per_chip_hour
    estimate = listed.estimate_label if d.usd_per_chip_hour == listed.value_usd else ""
    return Section(
        "hardware",
        "The hardware",
        (
            f"F  = {d.chips} x {fmt.si(chip.peak_flops(d.precisions.compute), 'FLOP/s')} "
            f"= {fmt.si(F, 'FLOP/s')} ({d.precisions.compute.compute_class.value}, dense)",
            f"BW = {d.chips} x {fmt.si(chip.hbm_bandwidth_bytes_per_s, 'B/s')} = {fmt.si(BW, 'B/s')}",
            f"HBM = {d.chips} x {fmt.nbytes(chip.hbm_capacity_bytes)}; weights take "
            f"{fmt.nbytes(d.weight_bytes_per_chip)} per chip of {fmt.nbytes(d.usable_bytes_per_chip)} usable",
            f"price {fmt.usd(d.usd_per_chip_hour)}{estimate} per chip-hour (as of {listed.date})",
            f"efficiency: {d.efficiency_label}",
        ),
        subtitle="chips act as one ideal chip; no communication cost",
    )


def _step(result: Explanation) -> Section:
    d = result.deployment
    c0 = float(result.contexts[0])
    return Section(
        "step",
        "1. One decode step",
        (
            "t_compute = B x (2 N_active + attention(L)) / F",
            "t_weights = weight bytes read / BW   (MoE: E(1-(1-k/E)^B) experts per layer)",
            "t_kv      = B x KV bytes per sequence(L) / BW",
            "blackboard: t_step >= max(t_compute, t_weights + t_kv)",
            "each operator (projections, attention, experts, ...) is its own roofline, so the step is",
            "t_step = sum over operators of max(t_compute_op, t_memory_op), at most 2x the blackboard",
            f"at L = {c0:,.0f}: 2 N_active + attention = "
            f"{fmt.si(float(arch.decode_flops_per_token(d.model, c0)), 'FLOP')} "
            f"per token; KV per sequence = {fmt.nbytes(float(d.kv_bytes_per_sequence(c0)))}",
        ),
        subtitle="batch B, context L",
    )


def _floor(result: Explanation) -> Section:
    d = result.deployment
    floor = (
        f"t_floor = N x bytes / BW = {fmt.nbytes(pooled.latency_floor_bytes(d))} / "
        f"{fmt.si(d.bandwidth_bytes_per_s, 'B/s')} = {fmt.seconds(result.latency_floor_s)}"
    )
    if d.model.is_moe:
        lines: tuple[str, ...] = (
            floor + ": no step that touches every expert is faster",
            f"at B = 1 a token reads only its k experts per layer: the step takes "
            f"{fmt.seconds(result.batch_one_step_s)} -> at most "
            f"{1 / result.batch_one_step_s:,.0f} tokens/s per user",
        )
    else:
        lines = (floor + f"  -> at most {1 / result.latency_floor_s:,.0f} tokens/s per user",)
    return Section("floor", "2. Latency floor", lines, subtitle="every weight read once")


def _balance(result: Explanation) -> Section:
    d = result.deployment
    m = d.model
    bal = result.balance
    wbytes = d.precisions.weights.bytes_per_element
    lines = [
        f"chip ratio F / BW = {bal.flop_per_byte:,.0f} FLOP/byte  (a property of the chip, not a batch)",
        f"dense balance  B = F x bytes/weight / (2 x BW) = {bal.flop_per_byte:,.0f} x {wbytes:g} / 2 "
        f"= {bal.dense_balance_batch:,.0f}   (the lecture's ~300)",
        f"with sparsity  B* = {bal.dense_balance_batch:,.0f} x N_total/N_active "
        f"= {bal.dense_balance_batch:,.0f} x {bal.sparsity:.1f} = {bal.balance_batch:,.0f}",
    ]
    moe = m.moe
    if m.is_moe and moe:
        routed = moe.num_experts / moe.experts_per_token
        lines.append(
            f"routed sparsity E/k = {routed:g}, but attention, dense layers"
            + (", shared experts" if moe.num_shared_experts else "")
            + f" and embeddings are always active, so N_total/N_active = {bal.sparsity:.1f}."
        )
    for c, b in zip(result.contexts, bal.balance_batch_with_kv, strict=True):
        text = f"{b:,.0f}" if np.isfinite(b) else "none: the KV fetch alone keeps every batch memory-bound"
        lines.append(f"with KV at L = {c:,.0f} (exact, routing included): B* = {text}")
    lines.append(
        f"cost per token at B = 1 over cost at B = {result.cost_reference_batch:,.0f}, "
        f"KV included: {result.batch_one_over_balance_cost:,.0f}x "
        + (
            "(an MoE model reads only k experts per layer at B = 1, so even without KV the ratio is "
            "below B*: batching is still the master lever)"
            if m.is_moe
            else "(ignoring KV this ratio equals B* itself: batching is the master lever)"
        )
    )
    curve = ", ".join(
        f"{c / 1024:,.0f}K {fmt.pct(u)}"
        for c, u in zip(result.mfu_contexts, result.mfu_at_balance_batch, strict=True)
        if c in (2**12, 2**14, 2**16, 2**18, 2**20)
    )
    lines.append(f"MFU against context at B = {bal.balance_batch:,.0f}: {curve}")
    return Section(
        "balance", "3. The balance batch", tuple(lines), subtitle="weight fetch time = compute time"
    )


def _memory(result: Explanation) -> Section:
    chip = result.deployment.system.chip
    lines = [
        f"HBM drain time = {fmt.nbytes(chip.hbm_capacity_bytes)} / "
        f"{fmt.si(chip.hbm_bandwidth_bytes_per_s, 'B/s')} = {fmt.seconds(result.hbm_drain_time_s)} "
        "(no step that reads all of HBM is faster)"
    ]
    lines += [
        f"largest batch that fits at L = {c:,.0f}: {mb:,.0f} sequences"
        for c, mb in zip(result.contexts, result.max_batch, strict=True)
    ]
    return Section("memory", "4. Memory", tuple(lines))


def _prefill(result: Explanation) -> Section:
    pf = result.prefill
    lines = tuple(
        f"L = {c:,.0f}: {fmt.seconds(pf.step.step_s[0, j])}, bound by {pf.step.bottleneck[0, j]}, "
        f"MFU {fmt.pct(pf.mfu[0, j])}, "
        f"{fmt.usd(pf.usd_per_million_input_tokens[0, j])} per million input tokens"
        for j, c in enumerate(result.contexts)
    )
    return Section(
        "prefill", "5. Prefill", lines, subtitle="one prompt of L tokens; its KV is written, not read"
    )


def _speculative(result: Explanation) -> Section:
    g = result.speculative
    assert g is not None
    s = g.speculation
    kind = s.kind.value
    rates = " x ".join(f"{a:.3g}" for a in g.to_dict()["tree_acceptance_by_position"])
    reach = " + ".join(f"{p:.3g}" for p in np.cumprod(s.rates))
    layers = result.deployment.model.num_layers
    rows = "B" if s.width == 1 else f"{s.width} B"
    draft = {
        "mtp": f"t_draft = k x t_decode({rows}) / L_layers = {s.depth} x t_decode / {layers} "
        "(an MTP module: one extra layer of the target per draft token)",
        "eagle": f"t_draft = k x t_decode({rows}) / L_layers = {s.depth} x t_decode / {layers} "
        "(an EAGLE head: about one decoder layer of the target per draft token)",
        "ngram": "t_draft = 0 (n-gram prompt lookup: a string match on the host, no model work)",
        "draft": f"t_draft = k x t_decode(draft {s.draft.id if s.draft else ''}, {rows}) = "
        f"{s.depth} draft decode steps",
    }[kind]
    on = g.to_dict()["on"]
    where = (
        f"the plan's step ({on}: its TP/EP/DP communication and hops included)"
        if g.planned
        else "one decode step on the ideal chip"
    )
    i = 0
    tree = (
        f"; a tree of {s.width} candidates per position: a_i(w) = 1 - (1 - a_i)^{s.width}"
        if s.width > 1
        else ""
    )
    lines = [
        f"{s.label}" + (f" (given as {s.given})" if s.given else "") + tree,
        f"acceptance by position {rates}",
        f"E[tokens per step] = 1 + sum_i prod_(j<=i) a_j = 1 + {reach} = {g.tokens_per_step:.3f}",
        f"t_verify = {where} with T = 1 + w k = {s.tokens_verified} tokens per sequence "
        "(weights read once, GEMM work and dispatched tokens x T, KV read once per sequence)",
        draft,
        "TPOT = (t_verify + t_draft) / E[tokens per step];  gain = E x t_decode / (t_verify + t_draft)",
        f"at B = {g.batch[i, 0]:,.0f}: t_verify {fmt.seconds(g.verify.step_s[i, 0])}, "
        f"t_draft {fmt.seconds(g.draft_s[i, 0])}, TPOT {fmt.seconds(g.tpot_s[i, 0])} "
        f"against {fmt.seconds(g.plain.step_s[i, 0])}: {g.speedup[i, 0]:.2f}x",
    ]
    gains = ", ".join(f"{b:,.0f}: {x:.2f}x" for b, x in zip(g.batch[:, 0], g.speedup[:, 0], strict=True))
    even = g.break_even_batch()
    lines.append(f"gain by batch: {gains}")
    if g.context.shape[1] > 1:
        by_context = ", ".join(f"{c:,.0f}: {x:.2f}x" for c, x in zip(g.context[0], g.speedup[0], strict=True))
        lines.append(f"gain by context at B = {g.batch[0, 0]:,.0f}: {by_context}")
    lines.append(
        f"from batch {even:,.0f} the wider step costs more than the extra tokens save"
        if even is not None
        else "it helps at every batch shown: the cache is read once for the T queries, and only "
        "where the step is compute-bound do they take T x the time"
    )
    return Section(
        "speculative", "Speculative decoding", tuple(lines), subtitle="draft k tokens, verify in one step"
    )


def _prefix(result: Explanation) -> Section:
    assert result.prefix is not None
    return prefix_section(result.prefix)


def prefix_section(r: PrefixPrefill) -> Section:
    """A prefix-cache hit: TTFT per prompt and what a hit is worth, tier by tier (shared by
    ``explain`` and ``prices``)."""
    t = r.prefix.tier
    lines = [
        f"hit rate h = {r.prefix.hit_frac:g}: the first h L tokens' KV is cached in {t.name}; "
        "only the suffix is prefilled",
        "TTFT_hit = t_prefill(suffix, attending to the cached prefix) + KV bytes(h L) / BW_tier",
    ]
    for j in range(r.prompt_tokens.shape[1]):
        lines.append(
            f"L = {r.prompt_tokens[0, j]:,.0f}: {r.cached_tokens[0, j]:,.0f} cached tokens hold "
            f"{fmt.nbytes(float(r.cached_kv_bytes[0, j]))}, load {fmt.seconds(float(r.load_s[0, j]))} "
            f"at {fmt.si(t.bandwidth_bytes_per_s, 'B/s')}; TTFT {fmt.seconds(float(r.ttft_s[0, j]))} "
            f"against {fmt.seconds(float(r.ttft_cold_s[0, j]))} cold "
            f"({fmt.pct(float(r.prefill_flops_saved_frac[0, j]))} of the prefill FLOPs saved)"
        )
    lines.append(
        "the load runs at one device's bandwidth with the chips waiting (no overlap with compute): "
        "the least a hit is worth; striping over n devices divides the load by n"
    )
    lines.append(
        "what a hit is worth, tier by tier (chip time saved at the rental vs holding the KV an hour):"
    )
    for row in r.tier_values():
        retention = row["break_even_retention_s"]
        saved = row["saved_usd_per_million_hit_tokens"]
        worth = (
            f"saves {fmt.usd(saved)} per million hit tokens"
            if saved > 0
            else f"loses {fmt.usd(-saved)} per million hit tokens (loading is slower than recomputing)"
        )
        lines.append(
            f"  {row['tier']}: load {fmt.seconds(row['load_s'])}, {worth}; holding costs "
            f"{fmt.usd(row['hold_usd_per_million_tokens_per_hour'])} per million tokens per hour"
            + (f" -> pays if the next hit comes within {fmt.duration(retention)}" if retention > 0 else "")
        )
    return Section(
        "prefix", "Prefix caching", tuple(lines), subtitle="a hit skips the cached prefix's prefill"
    )


def _energy(result: Explanation) -> Section:
    e = result.energy
    assert e is not None
    p = e.power
    d = result.deployment
    i, j = result.focus_index
    g = result.decode
    lines = (
        f"P_op = P_idle + (P_max - P_idle) x u_op, u_op = busy fraction of the operator's bound resource; "
        f"P_idle = {p.idle_w:,.0f} W{' (estimated as a share of TDP)' if p.idle_estimate else ''}, "
        f"P_max = TDP = {p.max_w:,.0f} W per chip",
        f"J/token = PUE x sum_op P_op t_op x chips / tokens per step;  PUE = {e.pue:g}",
        f"at batch {g.batch[i, j]:,.0f}, L = {g.context[i, j]:,.0f}: "
        f"{e.it_power_w[i, j] / d.chips:,.0f} W per chip on average, "
        f"{e.joules_per_token[i, j]:,.3g} J per token, "
        f"{e.tokens_per_s_per_mw[i, j]:,.0f} tokens/s per MW "
        f"(beside {fmt.usd(float(g.usd_per_million_output_tokens[i, j]))} per million tokens)",
        f"at batch {g.batch[0, j]:,.0f}: {e.joules_per_token[0, j]:,.3g} J per token",
    )
    return Section("energy", "Energy", lines, subtitle="an idle floor plus activity, per operator")
