"""``SlurmWorkload``: submits stand-in training jobs with ``sbatch`` (dev clusters, tests, demo).

Each job runs one task per node under ``srun --label``; every task prints a ``[rankN]:``
iteration line per second, with the restart count, until ``train_iters`` iterations. Output goes
to ``<output_dir>/<name>-<jobid>.out``, appended across requeues (``--open-mode=append``), and
the job is requeueable, so the recovery recipe (requeue-hold, exclude, release) applies.
"""

from __future__ import annotations

import re

from medic.config.settings import SlurmSettings
from medic.domain.cluster import JobSpec
from medic.domain.ids import JobId
from medic.errors import PermanentError
from medic.schedulers.slurm.commands import SlurmCli
from medic.schedulers.slurm.runner import CommandRunner

__all__ = ["SlurmWorkload", "training_script"]


def training_script(iterations: int) -> str:
    """The ``sbatch --wrap`` body: one stand-in training task per node."""
    task = (
        f"for i in $(seq 1 {iterations}); do "
        f'echo "[rank${{SLURM_PROCID}}]: iteration $i/{iterations} on ${{SLURMD_NODENAME}} '
        f'restart ${{SLURM_RESTART_COUNT:-0}}"; sleep 1; done'
    )
    return f"srun --label --kill-on-bad-exit=1 bash -c '{task}'"


class SlurmWorkload:
    """``Workload`` port: ``sbatch`` with the job's name, node count, partition and comment."""

    def __init__(self, runner: CommandRunner, settings: SlurmSettings, *, output_dir: str) -> None:
        self._cli = SlurmCli(runner, timeout=settings.command_timeout_seconds)
        self._output_dir = output_dir.rstrip("/")

    def submit(self, spec: JobSpec) -> JobId:
        argv = ["sbatch", "--parsable", f"--job-name={spec.name}", f"--nodes={spec.num_nodes}"]
        argv += ["--ntasks-per-node=1", "--requeue", "--open-mode=append"]
        argv += [f"--output={self._output_dir}/%x-%j.out"]
        if spec.partition:
            argv.append(f"--partition={spec.partition}")
        if spec.comment:
            argv.append(f"--comment={spec.comment}")
        out = self._cli.run([*argv, f"--wrap={training_script(spec.train_iters)}"]).stdout
        match = re.match(r"\s*(\d+)", out)
        if match is None:
            raise PermanentError(f"sbatch printed no job id: {out.strip()!r}")
        return JobId(match.group(1))
