"""The first signature catalogue: what a log line means, as plain Python data.

Each :class:`Signature` says which layer a line implicates (``domain``), how it relates to a failure
(``role``: root cause, cascade symptom, confirmation, progress marker or noise), whether it is
direct evidence against the node that printed it (``implicates_node``) and what it calls for
(``action``). The matcher (:mod:`medic.detect.matcher`) tries them by ``priority`` (highest first,
all 0 here), then in catalogue order, and the first match wins, so specific signatures come before
generic ones (a CUDA ECC error before the NCCL watchdog line that wraps it, everything before the
generic Python exception).

Patterns are stdlib ``re`` regexes with named groups for the fields they extract. They are applied
to one physical line at a time, after the ``[rankN]:`` prefix is stripped, and must stay linear:
bounded gaps (``.{0,300}?``) instead of nested or unbounded wildcards. ``keywords`` are lowercase
literals of which at least one must occur in the lowercased line before the regex is tried (the
YAML catalogue has none: its engine pre-filters by itself). Example lines for every signature of
this module live in the tests.

The YAML catalogue (``catalogue/*.yaml``, loaded by :func:`medic.detect.catalogue.load_catalogue`,
schema in docs/signatures.md) fills the same dataclass, plus ``node_action``, ``xid``,
``priority``, ``constants``, ``fields`` and its ``examples`` / ``counter_examples``; their defaults
keep this module's catalogue valid as it is.

This module is data only: no I/O, no compilation, no imports beyond the domain.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from medic.domain.diagnosis import FaultDomain, JobAction, Role, Severity
from medic.domain.ids import SignatureId

__all__ = [
    "CATALOGUE",
    "HANG_SIGNATURE_ID",
    "SLOW_JOB_SIGNATURE_ID",
    "SLOW_NODE_SIGNATURE_ID",
    "Example",
    "NodeAction",
    "Signature",
]

# Derived findings (no log line behind them), emitted by medic.detect.progress. medic.attribute and
# medic.policy repeat these strings because the layers contract forbids them to import
# medic.detect; a test checks that the copies agree.
HANG_SIGNATURE_ID = SignatureId("medic.hang.no_progress")
SLOW_JOB_SIGNATURE_ID = SignatureId("medic.straggler.slow_job")
SLOW_NODE_SIGNATURE_ID = SignatureId("medic.straggler.slow_node")


class NodeAction(enum.StrEnum):
    """What a signature suggests for the node that printed it, for node repair."""

    NONE = "none"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    DRAIN_RESET = "drain_reset"
    REBOOT = "reboot"
    REPROVISION = "reprovision"
    POWER_CYCLE = "power_cycle"
    UPDATE_FIRMWARE = "update_firmware"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Example:
    """A real-format line a signature must match, with exactly the fields it must extract."""

    line: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Signature:
    """One known log line shape and what it means."""

    id: SignatureId
    title: str
    domain: FaultDomain
    role: Role
    severity: Severity
    implicates_node: bool
    """True when the line is direct evidence against the node that printed it (its kernel's Xid,
    its GPU's ECC error, its NIC's link). Cascades never implicate."""
    action: JobAction
    pattern: str
    reference: str
    keywords: tuple[str, ...] = ()
    """Lowercase literals; the pattern is tried only when one occurs in the line. Empty: always."""
    node_action: NodeAction | None = None
    """What node repair should do about the emitting node; None: not said."""
    xid: int | None = None
    """The NVIDIA Xid code the signature is about, if any."""
    priority: int = 0
    """When several signatures match one line the highest priority wins, then catalogue order."""
    constants: tuple[tuple[str, str], ...] = ()
    """Fields with fixed values, added to every detection's ``fields``."""
    fields: tuple[str, ...] = ()
    """The fields the pattern extracts (its named groups), in pattern order."""
    examples: tuple[Example, ...] = ()
    counter_examples: tuple[str, ...] = ()
    """Near-miss lines the pattern must not match."""


_H, _N, _S, _A, _NO = (
    FaultDomain.HARDWARE,
    FaultDomain.NETWORK,
    FaultDomain.SYSTEM_SOFTWARE,
    FaultDomain.APPLICATION,
    FaultDomain.NONE,
)
_ROOT, _CASC, _CONF, _PROG, _NOISE = (
    Role.ROOT,
    Role.CASCADE,
    Role.CONFIRMATION,
    Role.PROGRESS,
    Role.NOISE,
)
_INFO, _WARN, _ERR, _CRIT = Severity.INFO, Severity.WARNING, Severity.ERROR, Severity.CRITICAL
_RESTART, _STOP, _NONE = JobAction.RESTART, JobAction.STOP, JobAction.NONE

_XID_DOC = "https://docs.nvidia.com/deploy/xid-errors/index.html"
_CUDA_DOC = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
_NCCL_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
_DIST_DOC = "https://pytorch.org/docs/stable/distributed.html"
_ELASTIC_DOC = "https://pytorch.org/docs/stable/elastic/errors.html"
_MEGATRON = "https://github.com/NVIDIA/Megatron-LM"
_MLX5_DOC = "https://docs.kernel.org/networking/device_drivers/ethernet/mellanox/mlx5/index.html"
_ERRNO_DOC = "https://man7.org/linux/man-pages/man3/errno.3.html"

_NUM = r"\d{1,15}(?:\.\d{1,9})?"


def _xid(codes: str) -> str:
    """An NVRM Xid line for ``codes`` (a regex alternation): fields xid, pci, pid, process, detail.

    Unanchored: dmesg and journald put their own timestamp and host prefix before ``NVRM:``.
    """
    return (
        r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]{1,20})\): (?P<xid>" + codes + r"),"
        r"(?: pid=(?P<pid>[^,]{1,40}),)?(?: name=(?P<process>[^,]{1,80}),)?"
        r" ?(?P<detail>.{0,300})"
    )


def _sig(
    id: str,
    title: str,
    kind: tuple[FaultDomain, Role, Severity, JobAction],
    reference: str,
    keywords: tuple[str, ...],
    pattern: str,
    *,
    node: bool = False,
) -> Signature:
    domain, role, severity, action = kind
    return Signature(
        SignatureId(id), title, domain, role, severity, node, action, pattern, reference, keywords
    )


# Xid codes by how the node is involved (see shared/reference/xid-catalog.md): 13/31/43 are
# usually the application's own fault and 45 is teardown collateral; 63/92 ask for a GPU reset
# when convenient but do not stop the job; every other code, known or not, is treated as hardware
# trouble on the node (NVSentinel's default for unknown codes is CONTACT_SUPPORT too).
_XID_OTHER = r"(?!(?:13|31|43|45|48|63|79|92),)\d{1,4}"

# The last line of a Python traceback. Deliberately narrow: at the start of the line (after the
# rank prefix), a dotted class name ending in Error/Exception, then ": message" or nothing. The
# distributed runtime's own exceptions are excluded: they are symptoms of a failure elsewhere (the
# cascade signatures name them). A root, but STOP only when attribution establishes that it is
# deterministic (the same message on several ranks).
_EXCEPTION = (
    r"^(?!(?:[A-Za-z_]\w{0,60}\.){0,8}(?:Dist\w{0,20}Error|ChildFailedError|SignalException"
    r"|\w{0,40}Connection\w{0,20}Error|BrokenPipeError|TimeoutError)\b)"
    r"(?:[A-Za-z_]\w{0,60}\.){0,8}(?P<exception>[A-Z]\w{0,60}(?:Error|Exception))"
    r"(?::(?!.{0,300}?(?:NCCL|ProcessGroup|c10d|[Ww]atchdog)) ?(?P<message>.{0,300})|$)"
)

# fmt: off
_PROGRESS = (
    _sig("megatron.iteration", "Training iteration completed",
         (_NO, _PROG, _INFO, _NONE), _MEGATRON, ("elapsed time per iteration",),
         r"\biteration\s{1,16}(?P<step>\d{1,12})/\s{0,16}(?P<train_iters>\d{1,12}) \|"
         r".{0,400}?elapsed time per iteration \(ms\): (?P<iter_ms>" + _NUM + r")"
         r"(?:.{0,400}?tokens per second: (?P<tokens_per_s>" + _NUM + r"))?"),
    _sig("medic.sim.timing", "Per-node forward-backward compute time",
         (_NO, _PROG, _INFO, _NONE), "docs/simulator.md", ("[timing]",),
         r"\[timing\] step (?P<step>\d{1,12}) forward-backward: (?P<compute_ms>" + _NUM + r") ms"),
    _sig("megatron.checkpoint_saved", "Checkpoint saved",
         (_NO, _PROG, _INFO, _NONE), _MEGATRON, ("successfully saved checkpoint",),
         r"\bsuccessfully (?P<checkpoint>saved) checkpoint (?:from|at) iteration\s{1,16}"
         r"(?P<step>\d{1,12})"),
    _sig("megatron.checkpoint_loaded", "Checkpoint loaded",
         (_NO, _PROG, _INFO, _NONE), _MEGATRON, ("successfully loaded checkpoint",),
         r"\bsuccessfully (?P<checkpoint>loaded) checkpoint from .{0,400}?"
         r"\bat iteration\s{1,16}(?P<step>\d{1,12})"),
    _sig("megatron.init_distributed", "Distributed initialisation (start of an attempt)",
         (_NO, _PROG, _INFO, _NONE), _MEGATRON, ("initializing torch distributed",),
         r"initializing torch distributed with (?P<world_size>\d{1,9}) workers"),
)

_KERNEL = (
    _sig("xid.fallen_off_bus", "GPU has fallen off the bus (Xid 79)",
         (_H, _ROOT, _CRIT, _RESTART), _XID_DOC, ("xid",), _xid("79"), node=True),
    _sig("xid.ecc_dbe", "Uncorrectable double-bit ECC error (Xid 48)",
         (_H, _ROOT, _CRIT, _RESTART), _XID_DOC, ("xid",), _xid("48"), node=True),
    _sig("xid.memory_remap", "GPU row remap or high SBE rate (Xid 63, 92): reset when convenient",
         (_H, _ROOT, _WARN, _NONE), _XID_DOC, ("xid",), _xid("63|92"), node=True),
    # A confirmation, not a root: the Xid names a pid, not a job, and is usually the job's own
    # illegal access, whose CUDA error line is the root. As a root it would restart every job
    # sharing the node.
    _sig("xid.application_fault", "GPU exception or page fault from an application (Xid 13/31/43)",
         (_A, _CONF, _WARN, _NONE), _XID_DOC, ("xid",), _xid("13|31|43")),
    _sig("xid.preemptive_cleanup", "Preemptive cleanup (Xid 45): teardown collateral, not a cause",
         (_NO, _NOISE, _INFO, _NONE), _XID_DOC, ("xid",), _xid("45")),
    _sig("xid.gpu_error", "GPU error reported by the driver (Xid)",
         (_H, _ROOT, _ERR, _RESTART), _XID_DOC, ("xid",), _xid(_XID_OTHER), node=True),
    _sig("gpu.fallen_off_bus", "GPU has fallen off the bus (no Xid number)",
         (_H, _ROOT, _CRIT, _RESTART), _XID_DOC, ("fallen off the bus",),
         r"(?:.{0,200}?\b(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b)?"
         r".{0,300}?has fallen off the bus", node=True),
    _sig("mlx5.link_down", "NIC port link down (mlx5)",
         (_N, _ROOT, _ERR, _RESTART), _MLX5_DOC, ("link down",),
         r"mlx5_core (?P<pci>[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){1,3}(?:\.[0-9A-Fa-f])?)"
         r".{0,160}?\bLink down\b"
         r"(?: on port (?P<port>\d{1,3}))?", node=True),
    # Confirmations: a read-only local disk matters only if the job writes there (its own errno 30
    # line is the root); an OOM kill names a pid, and the job's exit code -9 is what fails it.
    _sig("kernel.fs_read_only", "Kernel remounted a local filesystem read-only",
         (_S, _CONF, _ERR, _NONE), "https://docs.kernel.org/admin-guide/ext4.html", ("read-only",),
         r"(?P<fs>EXT4-fs|XFS)[^\n]{0,200}?[Rr]emounting filesystem read-only", node=True),
    _sig("kernel.oom_kill", "Out-of-memory kill (Linux OOM killer or Slurm cgroup)",
         (_A, _CONF, _ERR, _NONE), "https://docs.kernel.org/admin-guide/mm/concepts.html",
         ("killed process", "oom"),
         r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d{1,10})"
         r"|Detected (?P<count>\d{1,9}) oom[-_ ]kill events?|step tasks have been OOM Killed"),
)

_CUDA = (
    _sig("cuda.ecc_uncorrectable", "Uncorrectable ECC error reported by CUDA",
         (_H, _ROOT, _CRIT, _RESTART), _CUDA_DOC, ("uncorrectable ecc",),
         r"uncorrectable ECC error encountered", node=True),
    _sig("cuda.nvlink_uncorrectable", "Uncorrectable NVLink error reported by CUDA",
         (_H, _ROOT, _CRIT, _RESTART), _CUDA_DOC, ("uncorrectable nvlink",),
         r"uncorrectable NVLink error was detected", node=True),
    _sig("cuda.device_unavailable", "CUDA device busy or unavailable",
         (_H, _ROOT, _ERR, _RESTART), _CUDA_DOC, ("busy or unavailable",),
         r"CUDA-capable device\(s\) (?:is/are|are|is) busy or unavailable", node=True),
    _sig("cuda.oom", "CUDA out of memory",
         (_A, _ROOT, _ERR, _STOP), "https://pytorch.org/docs/stable/notes/cuda.html",
         ("cuda out of memory", "cublas_status_alloc_failed"),
         r"(?P<exception>(?:torch\.(?:cuda\.)?)?OutOfMemoryError|RuntimeError): CUDA out of memory"
         r"(?:\. Tried to allocate (?P<requested>" + _NUM + r" ?[KMGT]?i?B))?"
         r"|(?P<cublas>CUBLAS_STATUS_ALLOC_FAILED)"),
    # Ambiguous (an application bug or a failing GPU, taxonomy category 33): restart, never
    # implicate; a kernel Xid on the node, if there is one, decides.
    _sig("cuda.illegal_access", "CUDA illegal memory access or instruction",
         (_A, _ROOT, _ERR, _RESTART), _CUDA_DOC,
         ("illegal memory access", "illegal instruction", "misaligned address"),
         r"an illegal (?:memory access|instruction) was encountered|misaligned address"),
    _sig("cuda.launch_failure", "CUDA unspecified launch failure",
         (_A, _ROOT, _ERR, _RESTART), _CUDA_DOC, ("unspecified launch failure",),
         r"unspecified launch failure"),
    _sig("cuda.unknown_error", "CUDA unknown error (often a crashed GPU)",
         (_H, _ROOT, _ERR, _RESTART), _CUDA_DOC, ("cuda error: unknown error",),
         r"CUDA error: unknown error"),
)

_NETWORK = (
    # Both ends of a broken queue pair report it, so it does not say which node is bad; the
    # kernel's link-down line does.
    _sig("nccl.ib_completion_error", "NCCL InfiniBand completion error",
         (_N, _ROOT, _ERR, _RESTART), _NCCL_DOC, ("got completion from peer",),
         r"NET/IB ?: Got completion from peer (?P<peer>[^ ]{1,128}) with (?:status=|error )"
         r"(?P<status>\d{1,5})(?:.{0,80}?vendor err (?P<vendor_err>\d{1,6}))?"),
    _sig("nccl.ofi_completion_error", "NCCL libfabric (EFA) request completed with error",
         (_N, _ROOT, _ERR, _RESTART), "https://github.com/aws/aws-ofi-nccl", ("net/ofi request",),
         r"NET/OFI Request \S{1,40} completed with error\. RC: (?P<rc>\d{1,6})"
         r"(?:\. Error: \d{1,6} \((?P<reason>[A-Z_]{1,40})\))?"),
)

_PROCESS = (
    _sig("python.dataloader_shm", "DataLoader worker ran out of shared memory (bus error)",
         (_A, _ROOT, _ERR, _RESTART), "https://pytorch.org/docs/stable/data.html", ("bus error",),
         r"DataLoader worker \(pid (?P<pid>\d{1,10})\) is killed by signal: Bus error"
         r"|bus error encountered in worker"),
    _sig("python.read_only_filesystem", "Write failed: read-only file system",
         (_S, _ROOT, _ERR, _RESTART), _ERRNO_DOC, ("read-only file system",),
         r"\[Errno 30\] Read-only file system(?:: '(?P<path>[^']{1,300})')?"),
    _sig("process.crash_signal", "Process crashed (segmentation fault or bus error)",
         (_S, _ROOT, _ERR, _RESTART), _ELASTIC_DOC, ("sigsegv", "segmentation fault", "sigbus"),
         r"Signal (?P<signal>11|7) \((?:SIGSEGV|SIGBUS)\)|\bSegmentation fault\b"
         r"|\b(?P<name>SIGSEGV|SIGBUS)\b"),
    # Usually std::terminate after a C++ exception: the NCCL watchdog aborts this way.
    _sig("process.sigabrt", "Process aborted (SIGABRT)",
         (_A, _CASC, _ERR, _RESTART), _ELASTIC_DOC, ("sigabrt",),
         r"Signal 6 \(SIGABRT\)|\bSIGABRT\b"),
)

_CASCADES = (
    _sig("nccl.watchdog_timeout", "NCCL watchdog caught a collective operation timeout",
         (_S, _CASC, _ERR, _RESTART), _DIST_DOC, ("watchdog caught collective operation timeout",),
         r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq_num>\d{1,12}),"
         r" OpType=(?P<op>\w{1,40}).{0,200}?Timeout\(ms\)=(?P<timeout_ms>\d{1,12})\)"
         r"(?: ran for (?P<ran_ms>\d{1,15}) milliseconds)?"),
    _sig("nccl.watchdog_abort", "NCCL watchdog or heartbeat monitor takes the process down",
         (_S, _CASC, _ERR, _RESTART), _DIST_DOC,
         ("watchdog", "heartbeat monitor", "taking the entire process down", "nccl operations"),
         r"Heartbeat monitor timed out|watchdog got stuck for (?P<seconds>\d{1,9}) seconds"
         r"|Exception \(either an error or timeout\) detected by watchdog"
         r"|Some NCCL operations have failed or timed out|taking the entire process down"
         r"|watchdog thread terminated with exception"),
    _sig("nccl.remote_error", "NCCL: remote process exited or network error",
         (_N, _CASC, _ERR, _RESTART), _NCCL_DOC, ("remote process exit", "ncclremoteerror"),
         r"remote process exited or there was a network error|ncclRemoteError"),
    _sig("nccl.peer_connection_lost", "Connection to a peer closed, reset or refused",
         (_N, _CASC, _ERR, _RESTART), _NCCL_DOC,
         ("connection closed by remote peer", "call to recv", "call to send",
          "socketstartconnect", "failed to execute operation"),
         r"Connection closed by remote peer"
         r"|[Cc]all to (?:recv|send) (?:from|to) .{0,160}?failed ?: "
         r"(?P<reason>Broken pipe|Connection reset by peer)"
         r"|socketStartConnect: Connect to (?P<peer>\S{1,128}) failed"
         r"|Failed to execute operation (?P<op>\w{1,40}) from rank (?P<peer_rank>\d{1,7})"),
    _sig("nccl.error", "NCCL error (internal or system)",
         (_S, _CASC, _ERR, _RESTART), _NCCL_DOC,
         ("nccl error in", "ncclinternalerror", "ncclsystemerror", "ncclunhandledcudaerror"),
         r"NCCL error in: .{0,300}?, (?P<reason>[^,]{1,80}), NCCL version"
         r"|nccl(?:Internal|System|UnhandledCuda)Error"),
    _sig("torchelastic.rendezvous_error", "Rendezvous or c10d store connection failed",
         (_S, _CASC, _ERR, _RESTART), _ELASTIC_DOC,
         ("rendezvous", "diststoreerror", "distnetworkerror", "client socket has timed out"),
         r"(?P<error>Rendezvous\w{0,40}Error|Dist(?:Store|Network)Error)\b"
         r"|client socket has timed out after (?P<timeout_s>\d{1,9})s"),
    _sig("torchelastic.child_failed", "torchrun reports a failed worker",
         (_A, _CASC, _ERR, _RESTART), _ELASTIC_DOC,
         ("childfailederror", "exitcode", "root cause (first observed failure)"),
         r"ChildFailedError\b|^Root Cause \(first observed failure\):"
         r"|failed \(exitcode: (?P<exitcode>-?\d{1,4})\) local_rank: (?P<local_rank>\d{1,5})"
         r"|^exitcode\s{0,8}: (?P<exit_status>-?\d{1,4})"),
    _sig("process.broken_pipe", "Broken pipe (the other end went away)",
         (_S, _CASC, _WARN, _RESTART), "https://man7.org/linux/man-pages/man7/pipe.7.html",
         ("broken pipe",), r"\bBroken pipe\b"),
)

_GENERIC = (
    _sig("python.exception", "Python exception (last line of a traceback)",
         (_A, _ROOT, _ERR, _RESTART), "https://docs.python.org/3/library/exceptions.html",
         ("error", "exception"), _EXCEPTION),
)
# fmt: on

CATALOGUE: tuple[Signature, ...] = (
    *_PROGRESS,
    *_KERNEL,
    *_CUDA,
    *_NETWORK,
    *_PROCESS,
    *_CASCADES,
    *_GENERIC,
)
"""Every signature, in matching order: the first one that matches a line wins."""
