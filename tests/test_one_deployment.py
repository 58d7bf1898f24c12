"""One deployment, one plan-step call site, one efficiency switch (issue 22, items 2 and 3).

Structure, as tests that fail on a planted violation: one class holds a model on a system with
its plan or precisions and produces steps; one call site assembles
:func:`rackmath.core.parallel.plan_step`'s arguments. Behaviour: the same point through
``explain``, ``plan``'s search, ``validate``'s engine and ``simulate`` is the same step to the
last bit; every command that costs a model on chips runs kernel-grounded by default and says
so in its text and its JSON.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.deploy import candidates as cand
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.kernels import tables as et
from rackmath.analyses.reality import correction as co
from rackmath.analyses.reality import validation as val
from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.catalog.runtimes import runtime
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.scenario import KvMemoryOf, Metric, Phase, Provenance, Scenario

PACKAGE = Path(rm.__file__).parent

# ----------------------------------------------------------------------------- structure

#: A class "holds a deployment" when it exposes these (a field, a property or ``self.x = ...``)...
HOLDS = {"model", "system"}
#: ... and one of these ...
SHAPES = {"plan", "precisions", "planned", "base"}
#: ... and "produces steps" when it defines one of these methods or calls ``plan_step``.
STEP_METHODS = {"step", "decode", "prefill", "ideal_step", "decode_step_s", "mixed_step_s"}


def _exposed(cls: ast.ClassDef) -> set[str]:
    names = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            decorators = {getattr(d, "id", getattr(d, "attr", "")) for d in node.decorator_list}
            if decorators & {"property", "cached_property"}:
                names.add(node.name)
    for node in ast.walk(cls):
        stored = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if stored and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return names


def _produces_steps(cls: ast.ClassDef) -> bool:
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    calls_plan_step = any(
        isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == "plan_step"
        for n in ast.walk(cls)
    )
    return bool(methods & STEP_METHODS) or calls_plan_step


def deployment_like_classes(source: str, where: str) -> list[str]:
    """``where:ClassName`` for every class of ``source`` that holds a model on a system with
    its plan or precisions and produces steps."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            exposed = _exposed(node)
            if exposed >= HOLDS and exposed & SHAPES and _produces_steps(node):
                found.append(f"{where}:{node.name}")
    return found


def plan_step_call_sites(source: str, where: str) -> list[str]:
    """``where:line`` of every call of ``plan_step`` (``par.plan_step(...)``, ``plan_step(...)``)."""
    return [
        f"{where}:{n.lineno}"
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == "plan_step"
    ]


def _scan(find) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        out += find(path.read_text(), str(path.relative_to(PACKAGE)))
    return out


def test_exactly_one_deployment_like_class() -> None:
    assert _scan(deployment_like_classes) == ["analyses/serving/deployment.py:Deployment"]


def test_the_deployment_detector_catches_a_planted_second_one() -> None:
    planted = """
class Engine:
    def __init__(self, s):
        self.model = s.model
        self.system = s.system
        self.base = s
    def decode_step_s(self, batch, contexts):
        return 0.0

class Settings:  # model, system and plan, but no step: a description, not a deployment
    model: str
    system: str
    plan: str
"""
    assert deployment_like_classes(planted, "planted.py") == ["planted.py:Engine"]


def test_one_call_site_assembles_plan_steps_arguments() -> None:
    sites = _scan(plan_step_call_sites)
    assert len(sites) == 1 and sites[0].startswith("analyses/serving/deployment.py:"), sites


def test_the_call_site_detector_catches_a_planted_second_one() -> None:
    planted = """
from rackmath.core import parallel as par
from rackmath.core.parallel import plan_step

def evaluate(m, load, **kw):
    step = par.plan_step(m, load=load, **kw)
    return plan_step(m, load=load, **kw), step
"""
    assert plan_step_call_sites(planted, "planted.py") == ["planted.py:6", "planted.py:7"]


def test_training_and_the_pool_compose_the_one_deployment() -> None:
    """The training job holds a Deployment (its price, efficiency, reserve and attention
    precision are the deployment's); the ideal chip is a pooled plan of ``tp = N``."""
    job = rm.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e9, seq_len=4096, global_batch=16)
    assert isinstance(job.setup.deployment, Deployment)
    assert job.setup.attention_precision is job.setup.deployment.attention_precision
    assert job.memory.usable_bytes == job.setup.deployment.usable_bytes_per_chip
    pool = rm.deployment("llama-3.1-8b", "h100-hgx", chips=8)
    assert pool.pooled and pool.plan == ParallelPlan(tp=8) and pool.plan_text == "ideal"


# ----------------------------------------------------------------------------- one step

#: Llama-3.1-70B on 8 H100s under tp=8, 64 sequences at 2,048 tokens of context: a point on
#: the simulator's step table (64 = the batch cap, 2,048 = the longest request, no prompt tokens)
POINT = ("llama-3.1-70b", "h100-hgx", "tp=8", 64, 2048)


def test_the_same_point_is_the_same_step_everywhere() -> None:
    model_id, system_id, plan, batch, context = POINT
    model, sys_ = resolve_model(model_id), system(system_id)
    explained = rm.explain(rm.deployment(model_id, system_id, chips=8), [batch], [context], plan=plan)
    step = explained.planned.step_s[0, 0]
    # plan's search: the decode pool at the mean context I + O / 2 = 2,048
    work = cand.Workload(traffic_tokens_per_s=1.0, input_len=1024, output_len=2048)
    c = cand.evaluate(model, sys_, "native", work, max_chips=8, batches=(batch,), phase="decode")
    assert c is not None
    i = int(np.flatnonzero((c.tp == 8) & (c.pp == 1) & (c.dp == 1) & (c.ep == 1))[0])
    # validate's engine: a one-step decode row, the kernel-grounded model with no correction
    prov = Provenance(0, "hand", "hand", "", "https://example.invalid", "", "exact", "")
    row = Scenario(
        prov,
        Phase.DECODE,
        Metric.DECODE_STEP_S,
        1.0,
        "s",
        "",
        model_id=model_id,
        system_id=system_id,
        chips=8,
        plan=ParallelPlan.parse(plan),
        batch=batch,
        input_tokens=context,
        output_tokens=1,
    )
    # simulate's step table, at 64 decoding sequences, no prompt tokens, 2,048 tokens
    profile = runtime("vllm").with_overrides(max_seqs=batch, max_tokens=8192)
    rep = sim.replica(plan_deployment(model, sys_, plan), profile, max_context=context, mean_context=context)
    t = rep.table
    j, k = int(np.flatnonzero(t.decode == batch)[0]), int(np.flatnonzero(t.context == context)[0])
    assert t.prefill_tokens[0] == 0
    assert c.tpot_s[i] == step  # to the last bit
    assert val.predict(row, co.KERNEL).value == step
    assert t.step_s[j, 0, k] == step


def test_the_same_point_is_the_same_memory_account_everywhere() -> None:
    """One reserve (10% of HBM), one weight share, one KV account, one concurrency rule: the
    explained plan, the search (which sizes a sequence at its full ``I + O`` context), the
    validation engine (vLLM's ``gpu_memory_utilization = 0.9``, the same 10%) and the training
    job agree, and the KV matches the textbook ``2 x layers x kv_heads x head_dim x bytes``."""
    model_id, system_id, plan, batch, context = POINT
    model, sys_ = resolve_model(model_id), system(system_id)
    dep = rm.deployment(model_id, system_id, chips=8)
    explained = rm.explain(dep, [batch], [context, 3 * context // 2], plan=plan)
    p = explained.planned
    # KV: 2 (K and V) x 80 layers x 8 KV heads x 128 dims x 2 bytes per token (Llama-3.1-70B's
    # config.json), the 8 KV heads split over tp = 8
    kv_per_token = 2 * 80 * 8 * 128 * 2
    assert p.kv_bytes_per_chip[0, 0] == batch * context * kv_per_token / 8
    # the reserve: 10% of HBM, the same for serving and training
    usable = sys_.chip.hbm_capacity_bytes * (1 - 0.10)
    assert explained.to_dict()["usable_bytes_per_chip"] == pytest.approx(usable, rel=1e-12)
    job = rm.train(model_id, system_id, plan, tokens=1e9, seq_len=4096, global_batch=16)
    assert job.memory.usable_bytes == p.memory.usable_bytes == pytest.approx(usable, rel=1e-12)
    # the weights one chip holds: 70.6e9 parameters (Meta's model card) x 2 bytes over tp = 8
    weights = p.weight_bytes_per_chip
    assert job.memory.weights_bytes == weights
    assert weights == pytest.approx(70.6e9 * 2 / 8, rel=0.01)
    # the search holds each sequence at I + O = 3,072 tokens: the plan's account at 3,072
    work = cand.Workload(traffic_tokens_per_s=1.0, input_len=1024, output_len=2048)
    c = cand.evaluate(model, sys_, "native", work, max_chips=8, batches=(batch,), phase="decode")
    assert c is not None
    i = int(np.flatnonzero((c.tp == 8) & (c.pp == 1) & (c.dp == 1) & (c.ep == 1))[0])
    assert c.memory_bytes_per_chip[i] == p.memory_bytes_per_chip[0, 1]
    assert bool(c.fits[i]) and bool(p.fits[0, 1])
    # the concurrency rule: sequences whose KV and one token's activations fit beside the weights
    act_per_sequence = float(np.asarray(p.memory.activation_bytes)[0, 0]) / batch
    per_sequence = context * kv_per_token / 8 + act_per_sequence
    limit = math.floor((usable - weights) / per_sequence)
    assert limit == 706
    assert plan_deployment(model, sys_, plan).max_concurrency([float(context)])[0] == limit
    prov = Provenance(0, "hand", "hand", "", "https://example.invalid", "", "exact", "")
    row = Scenario(
        prov,
        Phase.MAX_THROUGHPUT,
        Metric.OUTPUT_TOKENS_PER_S,
        1.0,
        "tokens/s",
        "",
        model_id=model_id,
        system_id=system_id,
        chips=8,
        plan=ParallelPlan.parse(plan),
        input_tokens=context // 2,
        output_tokens=context // 2,
        kv_memory_frac=0.9,
        kv_memory_of=KvMemoryOf.TOTAL,
    )
    assert dict(val.predict(row, co.KERNEL).detail)["kv_limited_concurrency"] == limit


# ----------------------------------------------------------------------------- one switch


#: Where the switch is chosen and carried: specs, analyses, views and the faces. ``core`` is left
#: out: its ``pure`` flag is a property of one operator's efficiency (:func:`core.efficiency.is_pure`
#: of a table entry, a fast path), computed from the table, never chosen by a caller.
SWITCH_LAYERS = ("specs", "analyses", "views", "cli", "web", "api.py")


def test_the_efficiency_has_one_encoding() -> None:
    """No parameter or field spells the switch another way (a bool, a table name)."""
    other = {"kernel_grounded", "efficiency_table", "pure", "efficiency_mode"}
    found = []
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] in SWITCH_LAYERS]
    assert len(paths) > 100  # the layers are where they were
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in (*node.args.args, *node.args.kwonlyargs)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            found += [f"{path.relative_to(PACKAGE)}:{n}" for n in names if n in other]
    assert not found
    assert rm.Efficiency().mode is EfficiencyMode.KERNEL  # the one default


#: Every command that costs a model on chips, with small arguments.
COMMANDS = {
    "explain": ("explain", "llama-3.1-8b", "--on", "h100-hgx", "--batch", "1,64"),
    "plan": (
        "plan",
        "llama-3.1-8b",
        "--on",
        "h100-hgx",
        "--max-chips",
        "8",
        "--aggregated-only",
        "--precision",
        "native",
    ),
    "pareto": ("pareto", "llama-3.1-8b", "--on", "h100-hgx", "--max-chips", "8"),
    "layout": ("layout", "llama-3.1-8b", "--on", "h100-hgx"),
    "simulate": ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--requests", "200"),
    "train": (
        "train",
        "llama-3.1-8b",
        "--on",
        "h100-hgx",
        "--plan",
        "tp=8",
        "--tokens",
        "1e9",
        "--seq-len",
        "4096",
        "--batch",
        "16",
    ),
    "prices": ("prices", "--as-of", "2026-11-22"),
    "fleet": (
        "fleet",
        "--model",
        "llama-3.1-8b",
        "--on",
        "h100-hgx",
        "--batch",
        "64",
        "--requests",
        "100",
        "--loads",
        "0.5",
    ),
}


def _labels(payload: object) -> list[dict]:
    """Every ``efficiency`` object (``mode`` and ``label``) anywhere in a JSON payload."""
    out = []
    if isinstance(payload, dict):
        e = payload.get("efficiency")
        if isinstance(e, dict) and "mode" in e:
            out.append(e)
        elif isinstance(e, dict):  # per system
            out += [v for v in e.values() if isinstance(v, dict) and "label" in v]
        for k, v in payload.items():
            if k != "efficiency":
                out += _labels(v)
    elif isinstance(payload, list):
        for v in payload:
            out += _labels(v)
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_is_kernel_grounded_by_default_and_says_so(cli, command: str) -> None:
    args = COMMANDS[command]
    code, text, err = cli(*args)
    assert code == 0, err
    line = next((s for s in text.splitlines() if "efficiency: " in s), "")
    assert "efficiency: kernel-grounded (measured; " in " ".join(line.split()), text[-2000:]
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    stated = _labels(json.loads(out))
    assert stated, f"{command} --json states no efficiency"
    assert all(e.get("mode", "kernel") == "kernel" for e in stated)
    assert all(e["label"].startswith("kernel-grounded (measured; ") for e in stated)
    code, out, err = cli(*args, "--json", "--efficiency", "pure")
    assert code == 0, err
    assert {e["label"] for e in _labels(json.loads(out))} == {"pure roofline"}


def test_sweep_is_kernel_grounded_by_default_and_says_so(cli, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "models: [llama-3.1-8b]\nsystems: [h100-hgx]\nplans: [ideal, tp=8]\nbatch: [1, 64]\ncontext: [1024]\n"
    )
    code, text, err = cli("sweep", str(spec), "--out", str(tmp_path / "t.csv"))
    assert code == 0, err
    assert "efficiency: kernel-grounded (measured; " in " ".join(text.split())
    code, out, err = cli("sweep", str(spec), "--out", str(tmp_path / "t.csv"), "--json")
    assert code == 0, err
    label = et.efficiency_label("h100-sxm", rm.Efficiency())
    assert json.loads(out)["efficiency"] == {"h100-hgx": {"label": label}}
    pd = pytest.importorskip("pandas")
    table = pd.read_csv(tmp_path / "t.csv")
    assert set(table["efficiency"]) == {label}
    spec.write_text(spec.read_text() + "efficiency: [kernel, pure]\n")
    code, _, err = cli("sweep", str(spec), "--out", str(tmp_path / "t.csv"))
    assert code == 0, err
    assert set(pd.read_csv(tmp_path / "t.csv")["efficiency"]) == {label, "pure roofline"}


def test_sparsity_states_its_closed_forms(cli) -> None:
    """``sparsity`` prices hypothetical models with the lecture's closed forms: it says so and
    has no switch to pretend otherwise."""
    code, text, err = cli("sparsity", "--sparsity", "1,8")
    assert code == 0, err
    assert "efficiency: pure roofline (the lecture's closed forms" in " ".join(text.split())
    code, out, err = cli("sparsity", "--sparsity", "1,8", "--json")
    assert code == 0, err
    assert json.loads(out)["efficiency"]["mode"] == "pure"
    code, _, err = cli("sparsity", "--efficiency", "pure")
    assert code == 2 and "--efficiency" in err


def test_train_defaults_to_the_kernel_curves_and_calibrated_is_the_scaled_roofline(cli) -> None:
    args = COMMANDS["train"][1:]
    job = rm.train(*args[:1], "h100-hgx", "tp=8", tokens=1e9, seq_len=4096, global_batch=16)
    assert job.setup.efficiency == rm.Efficiency() and job.setup.table == et.efficiency_table("h100-sxm")
    code, out, err = cli("train", *args, "--calibrated", "--json")
    assert code == 0, err
    e = json.loads(out)["efficiency"]
    assert e["mode"] == "pure" and e["label"] == "pure roofline x flops_frac 0.67"
