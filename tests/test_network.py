"""One network: serving and training price the same collective with the same bytes and time,
each checked against a hand derivation of the alpha-beta model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.analyses.serving.planned import topology
from rackmath.catalog.loader import system
from rackmath.core import collectives as coll
from rackmath.core import network as net
from rackmath.core import training as tr
from rackmath.core import training_comm as tcomm

NVL72 = topology(system("gb200-nvl72"))  # 900 GB/s NVLink, 2 us; 50 GB/s scale-out, 5 us
LINK_KW = {
    "scale_up_bandwidth_bytes_per_s": NVL72.scale_up_bytes_per_s,
    "scale_up_latency_s": NVL72.scale_up_latency_s,
    "scale_out_bandwidth_bytes_per_s": NVL72.scale_out_bytes_per_s,
    "scale_out_latency_s": NVL72.scale_out_latency_s,
}


def test_tp_all_reduce_is_one_function_for_serving_and_training() -> None:
    """TP = 8 inside one rack, 512 tokens x 7168 x 2 B = 7.34 MB: a ring all-reduce is
    2 (7/8) M / 900 GB/s + 2 x 7 x 2 us = 14.27 us + 28 us. Serving runs 2 per layer;
    training 2 per layer per forward and per backward."""
    message = 512 * 7168 * 2
    by_hand = 2 * (7 / 8) * message / 900e9 + 2 * 7 * 2e-6
    group = net.place(NVL72, 8)
    assert float(net.all_reduce_s(group, message)) == pytest.approx(by_hand, rel=1e-12)
    serving = float(net.tp_all_reduce_s(512, 7168, 1, 8, NVL72))
    training = tcomm.tp_comm_s(message, tcomm.group_link(8, 1, 72, **LINK_KW), layers=1, forward_passes=1)
    assert serving == pytest.approx(2 * by_hand, rel=1e-12)
    assert training == pytest.approx(2 * 2 * by_hand, rel=1e-12)


def test_expert_all_to_all_is_one_function_for_serving_and_training() -> None:
    """EP = 64 over two 32-chip domains, 32 tokens per chip of DeepSeek-V3 (k = 8 of 256):
    D = 64 (1 - prod_{j<8} (252-j)/(256-j)) destination ranks, M = 32 D x 7168 x 2 B;
    half stays in the domain (31/32 of it leaves the chip over NVLink), half crosses:
    (31/32)(M/2)/900 GB/s + 2 us + (1/2) M / 50 GB/s + 5 us. Serving: dispatch + combine;
    training: both again in the backward."""
    two_racks = topology(system("gb200-nvl72"), 32)
    ranks = 64 * (1 - float(np.prod([(252 - j) / (256 - j) for j in range(8)])))
    message = 32 * ranks * 7168 * 2
    by_hand = 31 / 32 * message / 2 / 900e9 + 2e-6 + 0.5 * message / 50e9 + 5e-6
    dispatch = float(net.expert_dispatch_bytes(32, 64, 256, 8, 7168))
    assert dispatch == pytest.approx(message, rel=1e-12)
    assert float(net.all_to_all_s(net.place(two_racks, 64), dispatch)) == pytest.approx(by_hand, rel=1e-12)
    serving = float(net.ep_all_to_all_s(32, ranks, 7168, 1, 64, two_racks))
    link = tcomm.group_link(64, 1, 32, **LINK_KW)
    training = tcomm.ep_comm_s(dispatch, link, moe_layers=1)
    assert serving == pytest.approx(2 * by_hand, rel=1e-12)
    assert training == pytest.approx(2 * serving, rel=1e-12)


def test_data_parallel_group_at_a_stride_spans_domains() -> None:
    """DP = 16 at stride 8 on 8-chip HGX boxes: one rank per box, 16 boxes; the all-reduce
    runs entirely over scale-out: 2 (15/16) M / B_out + 2 x 15 x alpha_out."""
    hgx = topology(system("h100-hgx"))
    group = net.place(hgx, 16, stride=8)
    assert (float(group.chips_per_domain), float(group.domains)) == (1.0, 16.0)
    m = 1e9
    by_hand = 2 * (15 / 16) * m / hgx.scale_out_bytes_per_s + 2 * 15 * hgx.scale_out_latency_s
    assert float(net.all_reduce_s(group, m)) == pytest.approx(by_hand, rel=1e-12)
    assert tcomm.dp_sync_s(m, m, group, tr.ZeroStage.NONE) == pytest.approx(by_hand, rel=1e-12)
    # FSDP: two weight all-gathers and one gradient reduce-scatter = 1.5 x the all-reduce
    assert tcomm.dp_sync_s(m, m, group, tr.ZeroStage.WEIGHTS) == pytest.approx(1.5 * by_hand, rel=1e-12)


@given(
    ep=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]),
    k=st.integers(1, 8),
)
def test_destination_ranks_lie_between_one_and_min_of_ep_and_k(ep: int, k: int) -> None:
    """A token's k distinct experts reach at least one rank and at most min(ep, k)."""
    d = float(coll.expected_destination_ranks(ep, 256, k))
    assert 1.0 - 1e-9 <= d <= min(ep, k) + 1e-9


def test_a_lone_rank_sends_nothing() -> None:
    one = net.place(NVL72, 1)
    assert float(net.all_reduce_s(one, 1e9)) == 0.0
    assert float(net.all_to_all_s(one, 1e9)) == 0.0
