"""Plots: draw what the analyses return (Matplotlib, headless)."""
