"""Core math: pure, vectorized functions. No I/O, no printing, no catalog lookups."""
