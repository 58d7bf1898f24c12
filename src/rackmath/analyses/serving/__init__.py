"""Serving: a model on chips, as one pooled chip or under a parallel plan, and what one
deployment serves (decode and prefill grids, the explain derivation's numbers, speculative
decoding, prefix caching, energy, disaggregated pools). Every other analysis builds on it."""
