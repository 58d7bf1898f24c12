"""Reversible layers, for real (PyTorch; install the ``torch`` extra).

``feistel`` inverts a Feistel round exactly whatever its inner function; ``revnet`` is a
reversible transformer block stack whose custom autograd function keeps no activations
in the forward pass and rebuilds them from the outputs in the backward pass (Gomez et al.
2017, "The Reversible Residual Network"; Kitaev et al. 2020, "Reformer", §3).

Torch is imported inside these modules only, so ``import rackmath`` never needs it.
"""
