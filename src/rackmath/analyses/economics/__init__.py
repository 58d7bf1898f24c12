"""Economics: API prices, prompt-cache tiers, fast modes, fleets under traffic, over-training
and sparsity."""
