"""Reproducing the papers: the demo (the main job) and the findings (verdict) table."""
