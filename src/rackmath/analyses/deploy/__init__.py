"""Deployments: the search over plans, batches, chips and precisions, its frontier, and the
planner's views built on it (compare, the systems frontier, the request simulator and SLOs,
sweeps, the lecture's layout arguments)."""
