"""Measuring this machine (``rackmath measure``). The torch-using code lives in
:mod:`rackmath.measure.torch_bench` and is imported only when a measurement runs, so the
rest of rackmath never needs torch (install it with ``pip install 'rackmath[measure]'``)."""
