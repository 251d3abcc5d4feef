"""Developer tooling used by the CLI and the tests only, never by the control plane itself.

:mod:`medic.dev.slurm` runs a real local Slurm 22.05 cluster (``medic dev slurm up``) that the
Slurm adapter's tests run against.
"""
