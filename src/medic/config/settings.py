"""Settings: nested frozen dataclasses, one docstring per field (unit, default, why).

``docs/configuration.md`` is generated from these docstrings (``medic config reference``) and a
test fails when a field is undocumented or the page is stale. Nothing here reads the environment;
``medic.config.loading`` builds a :class:`Settings` from the layers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from medic.domain.cluster import Mode

__all__ = [
    "DEFAULT_DETERMINISTIC_ERRORS",
    "Acting",
    "ApiSettings",
    "AttributionSettings",
    "ControllerSettings",
    "DetectSettings",
    "LoopSettings",
    "PolicySettings",
    "RepairSettings",
    "SchedulerSettings",
    "Settings",
    "SimSettings",
    "SlurmRunner",
    "SlurmSettings",
    "StoreSettings",
]


@dataclass(frozen=True, slots=True)
class StoreSettings:
    url: str = ""
    """SQLAlchemy database URL. Empty: a SQLite file ``medic.db`` under the user's state
    directory. ``postgresql+psycopg://...`` and ``mysql+pymysql://...`` are supported too.
    Env: ``MEDIC_DATABASE_URL`` (or ``MEDIC_STORE_URL``)."""


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    kind: str = "sim"
    """Which scheduler adapter to use: ``sim`` (built-in simulated cluster) or ``slurm``."""
    cluster: str = "sim"
    """Name of the cluster, as shown in the API, the audit trail and metrics."""
    mode: Mode = Mode.OBSERVE
    """``observe`` only recommends; ``act`` also issues scheduler commands. A job's comment can
    override it (``{"medic": {"mode": "act"}}``)."""


class SimLogProfile(enum.StrEnum):
    """Which lines the simulator's healthy jobs print (docs/simulator.md)."""

    DEMO = "demo"
    PRODUCTION = "production"


@dataclass(frozen=True, slots=True)
class SimSettings:
    nodes: int = 32
    """Number of simulated nodes (8 GPUs each)."""
    partitions: int = 2
    """Number of partitions the simulated nodes are split across."""
    jobs: int = 6
    """Training jobs submitted when the simulated cluster starts (``serve``, ``demo``)."""
    nodes_per_job: int = 4
    """Nodes each of those jobs asks for."""
    seed: int = 1
    """Random seed; the same seed and the same clock readings give the same run."""
    iteration_seconds: float = 0.5
    """Seconds one training iteration takes on a healthy node."""
    checkpoint_every: int = 10
    """Iterations between checkpoints."""
    nccl_timeout_seconds: float = 30.0
    """Seconds until surviving ranks report an NCCL watchdog timeout after a peer died (real
    PyTorch: 600)."""
    startup_seconds: float = 1.0
    """Seconds from allocation to the first iteration (process start and checkpoint load)."""
    node_repair_seconds: float = 60.0
    """Seconds after which a node broken by an injected hardware fault is healthy again (stands
    in for the repair that the node auto-repair issue automates)."""
    log_profile: SimLogProfile = SimLogProfile.DEMO
    """Which lines a healthy job prints (docs/simulator.md): ``demo`` (every node's ``[timing]``
    line each iteration, so per-node slowness shows, and the iteration line from rank 0) or
    ``production`` (what a real large job prints: one iteration line per step from the last
    rank, NCCL INFO set-up lines from every rank at start-up, about 1% harmless warnings, and
    harmless kernel lines on a few nodes a minute; the scale benchmark's profile)."""


@dataclass(frozen=True, slots=True)
class DetectSettings:
    hang_k: float = 4.0
    """A job hangs after ``max(hang_k x p95 progress interval, hang_floor_seconds)`` without
    progress."""
    hang_floor_seconds: float = 60.0
    """Lower bound of the hang threshold in seconds (far below the 600 s NCCL watchdog)."""
    straggler_drop: float = 0.2
    """Relative throughput drop against the job's own baseline that counts as slow (0.2 = 20%)."""
    straggler_seconds: float = 300.0
    """How long the drop must last, in seconds, before it is reported."""
    settle_seconds: float = 0.5
    """Seconds to wait after the first fatal detection of an attempt for evidence from other
    nodes before attributing; the earliest root cause still wins."""
    extra_signature_files: tuple[str, ...] = ()
    """A site's own signatures, added to the built-in catalogue without editing medic: YAML
    files, or folders whose ``*.yaml`` files are all read (sorted by name), in the catalogue's
    schema (``docs/signatures.md``; ``area`` is the file's stem) and checked exactly like it at
    start-up: ids may not clash with the built-in ones or each other, every example must be won
    by its own signature. A bad file stops medic (exit code 2) naming the file, the signature
    and the problem. Relative paths are read from medic's working directory. In the environment,
    separate paths with ``:``. See ``docs/job-logs.md``."""
    node_failure_wait_seconds: float = 60.0
    """Longest wait, while a node of a running job is only not responding, for the scheduler to
    declare it down and end the job itself (Slurm: ``SlurmdTimeout``) before medic acts."""


DEFAULT_DETERMINISTIC_ERRORS: tuple[str, ...] = (
    "TypeError",
    "NameError",
    "AttributeError",
    "KeyError",
    "IndexError",
    "ImportError",
    "ModuleNotFoundError",
    "SyntaxError",
    "IndentationError",
    "FileNotFoundError",
    "MisconfigurationException",
    "python.import_error",
    "python.file_not_found",
    "python.checkpoint_not_found",
    "hf.path_not_found",
    "deepspeed.batch_config_error",
    "llamafactory.no_valid_samples",
    "cuda.invalid_device_ordinal",
    "cuda.kernel_assertion",
    "python.argparse_error",
    "python.env_var_missing",
    "nccl.loopback_interface",
    "nccl.no_socket_interface",
    "nccl.invalid_usage",
    "nccl.invalid_argument",
    "nccl.duplicate_gpu",
)
"""Code and configuration errors of the user's program (issue 12, rule 4): exception class names
and signature ids. ``cuda.kernel_assertion`` is a kernel's own bounds check failing (an index past
the embedding table, a label past the classes): IndexError on the GPU, which the same data
raises again on any node."""


@dataclass(frozen=True, slots=True)
class PolicySettings:
    deterministic_errors: tuple[str, ...] = DEFAULT_DETERMINISTIC_ERRORS
    """Errors a retry cannot cure: stop the job after one attempt when one of them (a Python
    exception class name such as ``TypeError``, or a signature id such as
    ``nccl.loopback_interface``) is the attempt's root, even when only one rank raised it."""
    max_attempts_without_progress: int = 3
    """Stop a job when its last N attempts saved no new checkpoint."""
    restart_on_straggler: bool = False
    """Requeue a job (excluding the slow node) when a straggler is found, instead of only
    excluding the node at the next restart."""


@dataclass(frozen=True, slots=True)
class LoopSettings:
    interval_seconds: float = 0.2
    """Seconds between control-loop passes."""
    error_backoff_seconds: float = 5.0
    """How long a job whose evaluation raised is skipped before it is evaluated again."""
    workers: int = 1
    """Processes that match log lines and evaluate jobs, each for its own shard of the jobs
    (a job's shard: CRC-32 of its id modulo ``workers``); the loop's own process keeps what
    concerns the whole cluster (scheduler, inventory, node repair, acting on advice). 1: all in
    the loop's process. More than 1 needs a database the processes can share (a file, PostgreSQL
    or MySQL). See ``docs/scale.md``."""
    skip_quiet_jobs: bool = True
    """Skip, in a pass, the jobs for which nothing changed: same attempt and scheduler state, no
    new log line, no node of theirs changed, no decision pending and no time-driven check (hang,
    straggler, progress save) due. Exact by design (a skipped evaluation would have done
    nothing); ``false`` evaluates every job every pass, as before (the scale benchmark's
    reference, and a way to rule the skip out when investigating)."""


class SlurmRunner(enum.StrEnum):
    LOCAL = "local"
    SSH = "ssh"


class Acting(enum.StrEnum):
    """Who carries act-mode advice out on the scheduler."""

    EMBEDDED = "embedded"
    """The control loop of ``medic serve`` (each replica, under its cluster's lease)."""
    REMOTE = "remote"
    """Only ``medic controller`` processes: ``medic serve`` publishes advice and never issues a
    job's scheduler command."""


class RebootNextState(enum.StrEnum):
    """What Slurm does with a node medic rebooted, once it is back (``scontrol reboot
    nextstate=``)."""

    RESUME = "resume"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    runner: SlurmRunner = SlurmRunner.LOCAL
    """How Slurm commands run: ``local`` (this host is a Slurm client) or ``ssh`` (on
    ``ssh_host``, a login node)."""
    ssh_host: str = ""
    """Login node for ``runner: ssh``."""
    ssh_user: str = ""
    """SSH user for ``runner: ssh`` (empty: the current user)."""
    ssh_port: int = 22
    """SSH port for ``runner: ssh``."""
    ssh_key: str = ""
    """Private key file for ``runner: ssh`` (empty: ssh's defaults)."""
    slurm_conf: str = ""
    """``SLURM_CONF`` for the Slurm commands (empty: Slurm's default)."""
    snapshot_seconds: float = 1.0
    """Seconds between full listings of the cluster's jobs and nodes (``scontrol show jobs`` and
    ``nodes``); log lines are still read on every loop pass, and single jobs are always read
    fresh."""
    command_timeout_seconds: float = 20.0
    """Seconds before a Slurm command is abandoned (and retried on a later pass)."""
    kernel_log_template: str = ""
    """Path of each node's kernel log as seen from medic, with ``{node}`` for the node name
    (e.g. ``/var/log/nodes/{node}/kern.log``); empty: kernel logs are not read."""
    log_full_poll_seconds: float = 1.0
    """How often every tailed log file (job output, kernel logs) is read whatever file
    notifications said. Between full polls only the files inotify reports written are read,
    with those seen growing without a notification (written by another host to a shared
    filesystem) at every pass (``docs/scale.md``). 0: read every file every pass (no
    notifications)."""
    opt_in: bool = True
    """Only watch jobs whose comment carries a ``"medic"`` section."""
    reboot_nextstate: RebootNextState = RebootNextState.RESUME
    """State of a node medic rebooted once it is back: ``resume`` (Slurm returns it to service,
    and medic drains it again when revalidation is due: a job may start in between) or ``down``
    (it stays DOWN until medic returns it, after revalidation when due: no job in between;
    needs ``ReturnToService`` 0 or 1 in slurm.conf, since with 2 slurmd brings it back)."""


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    watchdog_timeout_seconds: float = 120.0
    """A job medic holds is released with its original constraints when no decision or
    convergence arrives within this many seconds, or the control plane is unreachable."""
    poll_seconds: float = 1.0
    """Seconds between polls of the advice feed by a remote controller."""
    acting: Acting = Acting.EMBEDDED
    """Who carries act-mode advice out: ``embedded`` (the control loop of ``medic serve``) or
    ``remote`` (only ``medic controller`` processes; ``medic serve`` publishes advice and never
    issues a job's scheduler command). See ``docs/replicas.md``."""
    lease_seconds: float = 8.0
    """How long a process's lease of a cluster's control work lasts without a renewal (renewed
    every third of it): the longest the other replicas or controllers wait to take the work over
    after its holder died. Keep it above a control-loop pass and the replicas' clock skew."""


@dataclass(frozen=True, slots=True)
class AttributionSettings:
    url: str = ""
    """URL of an external attribution service (HTTP POST, JSON); its verdict on each failure is
    recorded beside medic's as an ``external-verdict`` audit event. Empty: none."""
    timeout_seconds: float = 5.0
    """Seconds to wait for the external attribution service (it never delays medic's decision)."""
    name: str = "external"
    """Name of the external attribution service in the audit trail."""


@dataclass(frozen=True, slots=True)
class ApiSettings:
    host: str = "127.0.0.1"
    """Address ``medic serve`` binds; loopback unless told otherwise."""
    port: int = 8765
    """TCP port of the HTTP API."""
    run_loop: bool = True
    """Run the control loop inside ``medic serve``. False serves only the API and the console
    over the store: for extra API replicas, or when the loop runs in another process."""
    max_body_bytes: int = 2_097_152
    """Largest request body the API reads, in bytes (2 MiB; medic's own bodies are a few KiB).
    A larger one is refused with 413 before it is read: from its ``Content-Length``, or as soon
    as a chunked body grows past it."""


@dataclass(frozen=True, slots=True)
class RepairSettings:
    enabled: bool = True
    """Run node auto-repair in the control loop: turn failed health checks into alerts, alerts
    into repair recommendations (the per-cluster repair policy, stored, decides approval; by
    default a person approves every repair) and carry approved repairs out. Job recovery then
    also keeps requeued jobs off nodes under repair or with a critical alert firing. On by
    default: nothing is done to a node until a person approves it or the stored policy allows it
    to run automatically; false turns node repair off entirely (alerts are then not read)."""
    reset_gpu_command: str = ""
    """Operator hook for ``reset_gpu``: a shell command run on the medic host with ``{node}`` and
    ``{repair_id}`` replaced (shell-quoted; also in ``MEDIC_NODE``, ``MEDIC_REPAIR_ID``,
    ``MEDIC_ACTION``). It must return when the action is done; exit 0 means success. Empty: the
    scheduler's own provider does it (the simulator can; Slurm cannot)."""
    power_cycle_command: str = ""
    """Operator hook for ``power_cycle`` (host power off/on, e.g. through a BMC tool), as
    ``reset_gpu_command``. Empty: the provider's own (simulator only)."""
    reprovision_command: str = ""
    """Operator hook for ``reprovision`` (rebuild the machine from a clean image), as
    ``reset_gpu_command``. Empty: the provider's own (simulator only)."""
    migrate_command: str = ""
    """Operator hook for ``migrate`` (replace the machine by one on other hardware), as
    ``reset_gpu_command``. Empty: the provider's own (simulator only)."""
    remove_command: str = ""
    """Operator hook for ``remove`` (take the machine out for RMA; always a person's request),
    as ``reset_gpu_command``. Empty: the node only stays drained."""
    hook_timeout_seconds: float = 3600.0
    """Seconds a hook command may run before it is abandoned and the repair fails."""
    validation_commands: str = ""
    """The revalidation suite, run after the actions of the policy's ``validate_after`` (or
    after every repair with ``validate_always``): shell commands separated by `` ;; ``, each
    optionally named by a ``[name]`` prefix, with ``{node}`` and ``{repair_id}`` placeholders,
    e.g. ``[dcgm] dcgmi diag -r 2 --host {node} ;; [nccl] ssh {node} all_reduce_perf -g 8``.
    Exit 0: pass; another status: fail (hardware ticket, node stays out); a command that cannot
    run (exit 126/127) or times out: abort (the node returns to service, not marked faulty).
    Empty: validation aborts."""
    validation_timeout_seconds: float = 1800.0
    """Seconds each validation command may run; past that the suite aborts."""
    validate_always: bool = False
    """Revalidate the machine after every repair, not only after the policy's
    ``validate_after`` actions."""
    max_recommendations_per_pass: int = 100
    """Repairs recommended at most per loop pass; in an alert storm the rest follow in the next
    passes, oldest alert first (every alert is still recorded at once), so job recovery in the
    same loop never waits long behind node repair."""
    rejoin_timeout_seconds: float = 1800.0
    """Seconds a repaired node has to come back (answer again, rebooted when the action reboots
    it); past that the repair fails and the node stays drained."""
    alert_clear_seconds: float = 1800.0
    """An alert raised from a log line (a catalogue signature in a kernel or job log, or the
    agent's kernel finding) clears once its signal has been absent this long (no new sighting):
    a line is printed once, so without a window a healed node would stay degraded forever. An
    active repair answering the alert decides instead; a person can resolve one at any time
    (``medic alerts resolve``). 0: only a repair or a person clears them."""
    critical_alert_clear_seconds: float = 3600.0
    """The clear window of a critical alert (Xid 79, double-bit ECC, ...): longer, because a GPU
    that fell off the bus prints its Xid once and stays broken. 0: only a repair or a person."""
    cordon: bool = True
    """In act mode (the cluster's, or every partition of the node), drain a node as soon as an
    alert with direct evidence of a fault fires on it (critical, or an error a repair is mapped
    to; never the scheduler's own word), whatever the approval state of its repair
    (reason ``medic: cordon alert <id> ...``; no job is killed, running jobs finish), so new jobs
    stop landing on it while a person decides; it returns to service when the alert clears, its
    repair is done or a person resolves the alert. False: nodes leave the pool only when their
    repair starts."""


@dataclass(frozen=True, slots=True)
class Settings:
    store: StoreSettings = field(default_factory=StoreSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    sim: SimSettings = field(default_factory=SimSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    detect: DetectSettings = field(default_factory=DetectSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    attribution: AttributionSettings = field(default_factory=AttributionSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    repair: RepairSettings = field(default_factory=RepairSettings)
