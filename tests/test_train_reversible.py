"""Reversible layers for real: exact inversion, equal gradients, constant saved activations.

Needs the torch extra (``./dev test`` installs it); skipped without torch. Small, CPU, float64.
"""

from __future__ import annotations

import numpy as np
import pytest

from rackmath.reversible.feistel import (
    feistel_forward,
    feistel_inverse,
    feistel_network,
    feistel_network_inverse,
)


def _lossy(x: np.ndarray) -> np.ndarray:
    """Non-invertible: clamps, squares away the sign, and floors."""
    return np.floor(np.clip(x, -1.0, 1.0) ** 2 * 1000.0) + np.sin(x).sum()


def test_feistel_round_inverts_a_non_invertible_function_exactly():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=64), rng.normal(size=64)
    # the inner function really loses information
    assert np.array_equal(_lossy(np.array([0.5, -0.5])), _lossy(np.array([-0.5, 0.5])))
    a, z = feistel_forward(x, y, _lossy)
    x_back, y_back = feistel_inverse(a, z, _lossy)
    assert np.array_equal(x_back, x)
    np.testing.assert_allclose(y_back, y, rtol=0, atol=4 * np.finfo(np.float64).eps * np.abs(z).max())


def test_feistel_network_inverts_round_by_round():
    rng = np.random.default_rng(1)
    rounds = [_lossy, np.tanh, lambda v: np.round(v * 7) % 3]
    x, y = rng.normal(size=32), rng.normal(size=32)
    a, b = feistel_network(x, y, rounds)
    x_back, y_back = feistel_network_inverse(a, b, rounds)
    np.testing.assert_allclose(x_back, x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(y_back, y, rtol=0, atol=1e-12)


torch_only = pytest.mark.torch


@torch_only
def test_reversible_stack_inverts_to_float64_precision():
    torch = pytest.importorskip("torch")
    from rackmath.reversible.revnet import ReversibleStack

    torch.manual_seed(0)
    stack = ReversibleStack(16, depth=6, heads=2).double()
    x = torch.randn(2, 8, 32, dtype=torch.float64)
    y = stack(x)
    assert torch.equal(y, stack.forward_standard(x))
    error = (stack.inverse(y) - x).abs().max().item()
    assert error < 1e-13  # a few ulps of O(1) values after 6 blocks


@torch_only
def test_gradients_equal_standard_backprop():
    torch = pytest.importorskip("torch")
    from rackmath.reversible.revnet import ReversibleStack

    torch.manual_seed(1)
    stack = ReversibleStack(16, depth=4, heads=4).double()
    x = torch.randn(3, 10, 32, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 10, 32, dtype=torch.float64)

    (stack(x) * weight).sum().backward()
    rev_params = [p.grad.clone() for p in stack.parameters()]
    rev_x = x.grad.clone()
    stack.zero_grad()
    x.grad = None
    (stack.forward_standard(x) * weight).sum().backward()
    for got, want in zip(rev_params, (p.grad for p in stack.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(rev_x, x.grad, rtol=1e-10, atol=1e-12)
    assert all(g.abs().sum() > 0 for g in rev_params)


@torch_only
def test_saved_activation_bytes_constant_in_depth_for_reversible_linear_for_standard():
    torch = pytest.importorskip("torch")
    from rackmath.reversible.revnet import ReversibleStack, saved_activation_bytes

    batch, seq, d = 2, 8, 16
    reversible, standard = {}, {}
    for depth in (1, 2, 4, 8):
        torch.manual_seed(depth)
        stack = ReversibleStack(d, depth=depth, heads=2).double()
        x = torch.randn(batch, seq, 2 * d, dtype=torch.float64, requires_grad=True)
        with saved_activation_bytes(stack) as measured:
            stack(x)
        reversible[depth] = measured()
        with saved_activation_bytes(stack) as measured:
            stack.forward_standard(x)
        standard[depth] = measured()
    # reversible: only the stack's output, (B, S, 2d) float64, whatever the depth
    assert set(reversible.values()) == {batch * seq * 2 * d * 8}
    # standard: a fixed amount per block (linear, through the origin plus the input)
    per_block = standard[2] - standard[1]
    assert per_block > 0
    for depth in (4, 8):
        assert standard[depth] - standard[1] == per_block * (depth - 1)
    assert standard[8] > 10 * reversible[8]


@torch_only
def test_short_training_run_reaches_the_same_loss():
    torch = pytest.importorskip("torch")
    from rackmath.reversible.revnet import ReversibleStack

    def train(reversible: bool) -> list[float]:
        torch.manual_seed(3)
        stack = ReversibleStack(8, depth=3, heads=2).double()
        head = torch.nn.Linear(16, 1).double()
        x = torch.randn(16, 6, 16, dtype=torch.float64)
        target = torch.sin(x.sum(dim=-1, keepdim=True))
        opt = torch.optim.Adam([*stack.parameters(), *head.parameters()], lr=1e-2)
        losses = []
        for _ in range(40):
            opt.zero_grad()
            hidden = stack(x) if reversible else stack.forward_standard(x)
            loss = torch.nn.functional.mse_loss(head(hidden), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    rev, std = train(True), train(False)
    assert rev[-1] < 0.5 * rev[0]  # it learns
    np.testing.assert_allclose(rev, std, rtol=1e-8)
