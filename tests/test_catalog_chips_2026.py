"""Chips added for issues 23 (item 5) and 25 (item 8): H100 PCIe and NVL, L40S, RTX PRO 6000
Blackwell Server Edition, AWS Trainium and Trainium2, their systems, their kernel curves
(fitted or transferred) and what a report says about them.

Every figure below is the vendor's, as the catalog entry cites it (chips.yaml `source`); the
dense peaks are the datasheets' sparse figures halved where the vendor prints only those."""

from __future__ import annotations

import json

import pytest

from rackmath.analyses.kernels import tables as et
from rackmath.catalog import kernel_efficiency as ke
from rackmath.catalog import kernel_tables as kt
from rackmath.catalog import loader as catalog
from rackmath.errors import UnknownIdError
from rackmath.specs.precision import Precision

MiB = 2**20
GiB = 2**30

# chip -> {precision: dense FLOP/s}, HBM bytes/s, capacity bytes, TDP W, scale-up B/s per direction
DATASHEET = {
    # NVIDIA H100 datasheet, PCIe column: TF32 756*, BF16 1,513*, FP8 3,026* (sparse); 2,000 GB/s;
    # 350 W; nvidia-smi 81,559 MiB; PCIe Gen5 x16 128 GB/s both directions
    "h100-pcie": (
        {Precision.FP32: 51e12, Precision.TF32: 378e12, Precision.BF16: 756.5e12, Precision.FP8: 1513e12},
        2.0e12, 81_559 * MiB, 350, 64e9,
    ),
    # nvidia.com/en-us/data-center/h100 H100 NVL column: TF32 835*, BF16 1,671*, FP8 3,341*;
    # 3.9 TB/s; 350-400 W; nvidia-smi 95,830 MiB; NVLink bridge 600 GB/s both directions
    "h100-nvl": (
        {Precision.FP32: 60e12, Precision.TF32: 417.5e12, Precision.BF16: 835.5e12, Precision.FP8: 1670.5e12},
        3.9e12, 95_830 * MiB, 400, 300e9,
    ),
    # NVIDIA L40S datasheet: BF16 362.05 | 733*, FP8 733 | 1,466*; 864 GB/s; 350 W; 46,068 MiB;
    # PCIe Gen4 x16 64 GB/s bidirectional
    "l40s": (
        {Precision.FP32: 91.6e12, Precision.TF32: 183e12, Precision.BF16: 362.05e12, Precision.FP8: 733e12},
        864e9, 46_068 * MiB, 350, 32e9,
    ),
    # nvidia.com RTX PRO 6000 Blackwell Server Edition: FP4 4 PF*, FP8 2 PF*, BF16 1 PF*;
    # 1,597 GB/s; up to 600 W; 97,887 MiB (aiconfigurator-core's nvidia-smi); PCIe Gen5 x16
    "rtx-pro-6000": (
        {Precision.FP32: 120e12, Precision.BF16: 500e12, Precision.FP8: 1000e12, Precision.FP4: 2000e12},
        1.597e12, 97_887 * MiB, 600, 64e9,
    ),
    # AWS Neuron docs, trainium.rst: 190 BF16/FP8 TFLOPS, 47.5 FP32; 32 GiB at 820 GB/s;
    # NeuronLink-v2 384 GB/s per chip (read as both directions)
    "trn1": (
        {Precision.FP32: 47.5e12, Precision.BF16: 190e12, Precision.FP8: 190e12, Precision.INT8: 380e12},
        820e9, 32 * GiB, None, 192e9,
    ),
    # trainium2.rst: 1,299 FP8, 667 BF16, 181 FP32 TFLOPS; 96 GiB at 2.9 TB/s; NeuronLink-v3
    # 1,024 GB/s per chip inside a trn2.48xlarge (read as both directions)
    "trn2": (
        {Precision.FP32: 181e12, Precision.TF32: 667e12, Precision.BF16: 667e12, Precision.FP8: 1299e12},
        2.9e12, 96 * GiB, None, 512e9,
    ),
}  # fmt: skip


@pytest.mark.parametrize("chip_id", sorted(DATASHEET))
def test_new_chips_carry_their_datasheet_figures(chip_id: str) -> None:
    peaks, bandwidth, capacity, tdp, scale_up = DATASHEET[chip_id]
    chip = catalog.chip(chip_id)
    for precision, value in peaks.items():
        assert chip.peak_flops(precision) == pytest.approx(value, rel=1e-9), precision
    assert chip.hbm_bandwidth_bytes_per_s == pytest.approx(bandwidth)
    assert chip.hbm_capacity_bytes == capacity
    assert chip.tdp_w == tdp
    assert chip.scale_up_bandwidth_bytes_per_s_per_direction == pytest.approx(scale_up)
    assert chip.source and chip.price_usd_per_chip_hour.source


def test_the_hbm2e_h100_is_slower_than_the_sxm_part_on_the_same_silicon() -> None:
    pcie, sxm = catalog.chip("h100-pcie"), catalog.chip("h100-sxm")
    # 114 of 132 SMs: 756.5 / 989.4 = 0.765 of the SXM's dense BF16; HBM2e 2.0 of 3.35 TB/s
    assert pcie.peak_flops(Precision.BF16) / sxm.peak_flops(Precision.BF16) == pytest.approx(0.7646, abs=1e-4)
    assert pcie.hbm_bandwidth_bytes_per_s / sxm.hbm_bandwidth_bytes_per_s == pytest.approx(0.597, abs=1e-3)
    assert pcie.hbm_capacity_bytes == sxm.hbm_capacity_bytes  # both report 81,559 MiB
    assert "HBM2e" in pcie.name


def test_trainium_entries_state_neuroncores_per_chip_and_aws_prices() -> None:
    assert "2 NeuronCore-v2 per chip" in catalog.chip("trn1").name
    assert "8 NeuronCore-v3 per chip" in catalog.chip("trn2").name
    # on-demand list prices over 16 chips: trn1.32xlarge 21.50/h, trn2.48xlarge 35.7608/h
    assert catalog.chip("trn1").price_usd_per_chip_hour.value_usd == pytest.approx(21.50 / 16)
    assert catalog.chip("trn2").price_usd_per_chip_hour.value_usd == pytest.approx(35.7608 / 16)


SYSTEMS = {
    "h100-pcie-8": ("h100-pcie", 8, 8),
    "h100-nvl-8": ("h100-nvl", 2, 8),  # NVLink-bridged pairs; the pairs talk over PCIe
    "l40s-8": ("l40s", 8, 8),
    "rtx-pro-6000-8": ("rtx-pro-6000", 8, 8),
    "trn1-32xl": ("trn1", 16, 16),
    "trn2-48xl": ("trn2", 16, 16),
    "trn2-ultraserver": ("trn2", 64, 64),
}


@pytest.mark.parametrize("system_id", sorted(SYSTEMS))
def test_each_new_system_resolves_to_its_chip_and_domain(system_id: str) -> None:
    chip_id, domain, default = SYSTEMS[system_id]
    s = catalog.system(system_id)
    assert (s.chip.id, s.scale_up_domain_chips, s.default_chips) == (chip_id, domain, default)
    assert s.source and s.date


# system -> model that fits on its default chips, and the chip its curves come from
EXPLAIN = {
    "h100-pcie-8": ("llama-3.1-70b", "h100-sxm"),
    "h100-nvl-8": ("llama-3.1-70b", "h100-sxm"),
    "l40s-8": ("llama-3.1-8b", "l40s"),
    "rtx-pro-6000-8": ("llama-3.1-70b", "rtx-pro-6000"),
    "trn1-32xl": ("llama-3.1-8b", "h100-sxm"),
    "trn2-48xl": ("llama-3.1-70b", "h100-sxm"),
    "trn2-ultraserver": ("llama-3.1-405b", "h100-sxm"),
}


@pytest.mark.parametrize("system_id", sorted(EXPLAIN))
def test_explain_runs_on_each_new_system_and_says_where_its_curves_come_from(cli, system_id: str) -> None:
    model, curves_of = EXPLAIN[system_id]
    code, out, err = cli("explain", model, "--on", system_id, "--json")
    assert code == 0, err
    d = json.loads(out)
    chip = SYSTEMS[system_id][0]
    assert d["system"] == system_id and d["chip"] == chip
    transferred = curves_of != chip
    assert d["efficiency"]["transferred"] is transferred
    assert d["efficiency"]["transferred_from"] == (curves_of if transferred else None)
    gemm = next(o for o in d["points"][0]["operators"] if o["name"] == "dense_mlp")["kernel"]
    assert gemm["chip"] == curves_of and gemm["transferred"] is transferred
    assert d["points"][0]["step_s"] > 0


def test_transfers_are_stated_in_the_kernel_catalog_and_fits_are_own() -> None:
    for chip_id in ("h100-pcie", "h100-nvl", "trn1", "trn2"):
        assert ke.resolve(chip_id) == ("h100-sxm", True)
        assert et.efficiency_table(chip_id).source.startswith("transferred from h100-sxm")
    for chip_id, folder in (("l40s", "l40s"), ("rtx-pro-6000", "rtx_pro_6000_server")):
        assert kt.CHIP_DIRS[folder] == chip_id and ke.resolve(chip_id) == (chip_id, False)
        entries = ke.op_entries(chip_id)
        assert all(f"systems/data/{folder}/" in e["source"] for e in entries)
        assert {e["op_class"] for e in entries} >= {"gemm", "moe", "attention_decode", "attention_prefill"}
        assert "all_reduce:nccl" in ke.collective_entries(chip_id)


def test_the_rtx_pro_6000_fits_nvfp4_gemms_and_the_l40s_has_none() -> None:
    # Blackwell (sm_120) has FP4 tensor cores and the package timed NVFP4 GEMMs on it; Ada has none
    rtx = {(e["op_class"], e["dtype"]) for e in ke.op_entries("rtx-pro-6000")}
    l40s = {(e["op_class"], e["dtype"]) for e in ke.op_entries("l40s")}
    assert ("gemm", "nvfp4") in rtx and ("gemm", "nvfp4") not in l40s
    assert ("gemm", "fp8") in rtx and ("gemm", "fp8") in l40s


def test_a_chip_id_given_as_a_system_names_the_new_systems_in_one_line(cli) -> None:
    code, _out, err = cli("explain", "llama-3.1-8b", "--on", "trn2")
    assert code == 1 and "Traceback" not in err
    assert "trn2 is a chip, not a system; systems built from it: trn2-48xl, trn2-ultraserver" in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(UnknownIdError, match="did you mean"):
        catalog.chip("rtx-pro-600")


def test_calibrate_refuses_a_chip_without_tables_in_one_line(cli) -> None:
    code, _out, err = cli("calibrate", "kernels", "--chips", "trn2")
    assert code == 1 and "--chips" in err and "l40s" in err and "rtx-pro-6000" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_partial_check_compares_only_the_named_chips(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """`calibrate kernels --chips ... --check` refits those chips with the shipped date and
    compares their entries alone (a stand-in replaces the minute-long fit): each entry keeps
    the date it carries (a chip refitted alone is dated apart; the fit never reads the date),
    and a drifted parameter is a difference."""
    from rackmath.analyses.kernels import calibrate as kernel_calibrate

    shipped = ke.document()
    seen: dict[str, object] = {}

    def fake(chips, from_files=None, date=None):
        seen.update(chips=chips, date=date)
        return {"chips": {c: shipped["chips"][c] for c in chips}, "transferred": {}, "meta": {}}

    monkeypatch.setattr(kernel_calibrate, "calibrate_kernels", fake)
    code, out, err = cli("calibrate", "kernels", "--chips", "l40s,rtx-pro-6000", "--check")
    assert code == 0, err
    assert "refit reproduces l40s, rtx-pro-6000 in kernel_efficiency.yaml" in out
    assert seen == {"chips": ["l40s", "rtx-pro-6000"], "date": shipped["meta"]["date"]}

    def redated(chips, from_files=None, date=None):
        return {"chips": {c: dict(shipped["chips"][c], date="1999-01-01") for c in chips}, "meta": {}}

    monkeypatch.setattr(kernel_calibrate, "calibrate_kernels", redated)
    code, out, _err = cli("calibrate", "kernels", "--chips", "l40s", "--check")
    assert code == 0 and "refit reproduces l40s in" in out

    def drifted(chips, from_files=None, date=None):
        entry = dict(shipped["chips"][chips[0]])
        first = dict(entry["ops"][0], compute_frac=entry["ops"][0]["compute_frac"] * 0.9)
        entry["ops"] = [first, *entry["ops"][1:]]
        return {"chips": {chips[0]: entry}, "transferred": {}, "meta": {}}

    monkeypatch.setattr(kernel_calibrate, "calibrate_kernels", drifted)
    code, out, _err = cli("calibrate", "kernels", "--chips", "l40s", "--check")
    assert code == 1 and "differs from l40s in" in out


def test_the_l40s_collectives_refit_to_the_shipped_curves() -> None:
    """Reproducibility of the partial refit on its cheapest part: the L40S's NCCL tables
    (PCIe Gen4, 8 GPUs) refitted give the shipped collective curves to the written digit."""
    if kt.package_data_dir() is None:
        pytest.skip("aiconfigurator-core is not installed (pip install rackmath[kernels])")
    from rackmath.analyses.kernels import fit as kf
    from rackmath.analyses.kernels.calibrate import collectives_to_dict

    with kf.deterministic_threads():
        data = kf.load_package_chip("l40s", kinds=kf.COMM_KINDS)
        peaks = kf.ChipPeaks.of("l40s")
        comm, counts, ranges = kf.fit_collectives(data, peaks)
    fit = kf.ChipFit("l40s", [], comm, counts, dict(data.sources), ranges)
    refit = collectives_to_dict(fit)
    shipped = ke.document()["chips"]["l40s"]["collectives"]
    assert set(refit) == set(shipped) == {
        "all_reduce:nccl", "all_gather:nccl", "reduce_scatter:nccl", "all_to_all:nccl", "all_reduce:custom",
    }  # fmt: skip
    for name, entry in refit.items():
        assert entry == {k: v for k, v in shipped[name].items() if k != "band"}, name
