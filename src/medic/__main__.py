"""``python -m medic`` runs the CLI."""

from medic.cli import main

main()
