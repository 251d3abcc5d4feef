"""End-to-end tests of medic on a real local Slurm cluster (and the harness the Slurm recovery
benchmark shares with them)."""
