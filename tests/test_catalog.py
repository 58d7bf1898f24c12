"""The embedded catalogs: required ids, provenance on every entry, sane figures."""

from __future__ import annotations

import re

import pytest

from rackmath.catalog import loader as catalog
from rackmath.errors import PrecisionUnavailableError, UnknownIdError
from rackmath.specs.precision import Precision

CHIPS = [
    "a100-80gb", "h100-sxm", "h800", "h200", "b200", "b300", "gb200", "gb300", "rubin",
    "mi300x", "mi325x", "mi355x", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x",
]  # fmt: skip
SYSTEMS = {
    "h100-hgx": 8,
    "h800-hgx": 8,
    "h200-hgx": 8,
    "b200-hgx": 8,
    "gb200-nvl72": 72,
    "gb300-nvl72": 72,
    "mi300x-8": 8,
    "mi355x-8": 8,
    "tpu-v5p-pod": None,
    "tpu7x-pod": None,
}
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def test_required_chips_exist_with_sources_dates_and_prices() -> None:
    chips = catalog.chips()
    assert set(CHIPS) <= set(chips)
    for chip in chips.values():
        assert chip.source and ISO_DATE.match(chip.date), chip.id
        assert ISO_DATE.match(chip.price_usd_per_chip_hour.date), chip.id
        assert chip.price_usd_per_chip_hour.source, chip.id
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", chip.id)


def test_rubin_is_marked_announced() -> None:
    assert catalog.chip("rubin").status == "announced"
    assert catalog.chip("h100-sxm").status == "shipping"


def test_required_systems_and_domains() -> None:
    systems = catalog.systems()
    for system_id, domain in SYSTEMS.items():
        assert system_id in systems
        if domain is not None:
            assert systems[system_id].scale_up_domain_chips == domain
    for system in systems.values():
        assert system.source and ISO_DATE.match(system.date)
        assert system.default_chips >= 1


def test_peaks_are_dense_and_ordered() -> None:
    # halving the precision never lowers the peak on any chip that has both
    order = [Precision.FP32, Precision.TF32, Precision.BF16, Precision.FP8, Precision.FP4]
    for chip in catalog.chips().values():
        present = [chip.peak_flops_per_s[p] for p in order if p in chip.peak_flops_per_s]
        assert present == sorted(present), chip.id
    h100 = catalog.chip("h100-sxm")
    assert h100.peak_flops(Precision.BF16) == pytest.approx(989.4e12)  # dense, not 1979 sparse


def test_link_bandwidth_is_per_direction() -> None:
    # NVLink 4: 900 GB/s counts both directions, 450 GB/s each way
    assert catalog.chip("h100-sxm").scale_up_bandwidth_bytes_per_s_per_direction == pytest.approx(450e9)
    # a 400 Gb/s NIC is 50 GB/s per direction
    assert catalog.chip("h100-sxm").scale_out_bandwidth_bytes_per_s_per_direction == pytest.approx(50e9)


def test_tpu_capacity_is_binary() -> None:
    assert catalog.chip("tpu-v5p").hbm_capacity_bytes == pytest.approx(95 * 2**30)


def test_unknown_ids_suggest_close_matches() -> None:
    with pytest.raises(UnknownIdError, match="did you mean h100-sxm"):
        catalog.chip("h100-sx")
    with pytest.raises(UnknownIdError, match="gb200-nvl72"):
        catalog.system("gb200-nvl")
    with pytest.raises(UnknownIdError, match="deepseek-v3"):
        catalog.model("deepsek-v3")


def test_missing_precision_is_refused_not_invented() -> None:
    with pytest.raises(PrecisionUnavailableError, match="a100-80gb has no fp8"):
        catalog.chip("a100-80gb").peak_flops(Precision.FP8)


def test_block_formats_compute_at_their_element_rate() -> None:
    assert Precision.MXFP4.bytes_per_element == pytest.approx(4.25 / 8)
    assert catalog.chip("b200").peak_flops(Precision.MXFP4) == catalog.chip("b200").peak_flops(Precision.FP4)


# nvidia-smi "MiB" totals, times 2**20 bytes: Modal's readings (thundergolfer.com/blog/
# nvidia-gpu-memory-capacity) for A100 80GB, H100, H200; NVIDIA/TensorRT-LLM issue #10278 for
# B200; aiconfigurator-core 0.12.0 systems/*.yaml ("reported by nvidia-smi") for B300, GB200, GB300.
NVML_MIB = {
    "a100-80gb": 81_920,
    "h100-sxm": 81_559,
    "h800": 81_559,
    "h200": 143_771,
    "b200": 183_359,
    "b300": 275_040,
    "gb200": 189_471,
    "gb300": 284_208,
}


@pytest.mark.parametrize(("chip_id", "mib"), NVML_MIB.items())
def test_nvidia_capacities_are_nvml_bytes(chip_id: str, mib: int) -> None:
    assert catalog.chip(chip_id).hbm_capacity_bytes == mib * 2**20


def test_gb200_capacity_is_the_nvml_figure_not_the_marketing_one() -> None:
    assert catalog.chip("gb200").hbm_capacity_bytes == 198_674_743_296  # not 186e9


def test_vendor_capacities_say_so_and_estimated_prices_are_flagged() -> None:
    for chip_id in ("rubin", "mi300x", "mi325x", "mi355x"):
        assert "vendor figure" in catalog.chip(chip_id).notes
    for chip in catalog.chips().values():
        price = chip.price_usd_per_chip_hour
        # a derived price says so in its note, and only then carries the flag
        assert price.estimate == price.note.startswith("estimate"), chip.id
        assert price.estimate_label == (" (estimate)" if price.estimate else "")
    assert catalog.chip("gb300").price_usd_per_chip_hour.estimate
    assert not catalog.chip("h100-sxm").price_usd_per_chip_hour.estimate
