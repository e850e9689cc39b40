"""``python -m landscape`` runs the command line."""

from landscape.cli import main

main()
