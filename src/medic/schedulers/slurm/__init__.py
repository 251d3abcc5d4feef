"""medic.schedulers.slurm: medic's ports on a real Slurm cluster, through its command-line clients.

Only ``medic.wiring`` imports this package. For ``scheduler.kind: slurm`` it builds::

    runner = runner_from_settings(settings.slurm)          # LocalRunner or SshRunner
    scheduler = SlurmScheduler(runner, cluster, settings.slurm)
    node_provider = SlurmNodeProvider(runner, settings.slurm)
    logs = SlurmLogSource(store, settings.slurm, clock=clock)

``SlurmWorkload`` (``sbatch``) is for dev clusters and tests. Modules: ``runner`` (how commands
run), ``commands`` (their failures -> ``medic.errors``), ``versions`` (every Slurm version's JSON
-> the oldest shape), ``normalise`` (JSON payloads -> canonical records), ``scontrol``
(``scontrol show -o`` text -> canonical records), ``convert`` (canonical -> ``Job``/``Node``),
``hostlist``, ``adapter``, ``logs``, ``workload``.
"""

from medic.schedulers.slurm.adapter import SlurmNodeProvider, SlurmScheduler
from medic.schedulers.slurm.logs import SlurmLogSource
from medic.schedulers.slurm.runner import (
    CommandResult,
    CommandRunner,
    LocalRunner,
    SshRunner,
    runner_from_settings,
)
from medic.schedulers.slurm.workload import SlurmWorkload

__all__ = [
    "CommandResult",
    "CommandRunner",
    "LocalRunner",
    "SlurmLogSource",
    "SlurmNodeProvider",
    "SlurmScheduler",
    "SlurmWorkload",
    "SshRunner",
    "runner_from_settings",
]
