"""Loss surfaces: directions (directions) and the grid evaluation and its file (run)."""
