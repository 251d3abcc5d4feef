"""Building and running the agent from its options, shared by ``medic agent`` (Typer) and
``python -m medic.agent`` (argparse, for nodes that have only the agent's own dependencies:
httpx and nvidia-ml-py, no control-plane packages).

``--once`` runs every check once and prints the findings (exit status 1 when one fails, 0
otherwise, as a health-check program); without it the agent runs until SIGINT or SIGTERM.

Posting to the API (``--api``) needs a ``detector`` token: ``--token-file PATH`` (preferred: a
command line is visible to every user of the node), ``MEDIC_TOKEN`` or ``--token``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from medic.agent.checks import Check, CheckResult, CheckStatus
from medic.agent.gpu import GpuThresholds
from medic.agent.host import FilesystemCheck, InfinibandCheck
from medic.agent.kernel import KernelClassifier, LineSource, make_follower
from medic.agent.nvml import GpuChecks
from medic.agent.runner import Agent
from medic.agent.sender import AlertSender, default_detector

__all__ = [
    "AgentConfig",
    "OptionError",
    "build_agent",
    "execute",
    "main",
    "print_findings",
    "run_until_signal",
]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][\w.:@+-]{0,127}$")


class OptionError(ValueError):
    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


@dataclass(frozen=True, slots=True)
class AgentConfig:
    api: str | None = None
    cluster: str | None = None
    node: str | None = None
    """Default: the host name (first label)."""
    detector: str | None = None
    """Default: ``agent:<host>``."""
    kernel: str = "kmsg"
    """``kmsg``, ``journal``, ``file:PATH`` or ``none``."""
    interval: float = 30.0
    fs: tuple[str, ...] = ("/",)
    once: bool = False
    gpus: int | None = None
    spool: Path | None = None
    refire: float = 300.0
    timeout: float = 10.0
    fs_full_percent: float = 95.0
    temperature_limit: float | None = None
    pcie_replays_per_minute: float = 8.0
    ib_root: str = "/sys/class/infiniband"
    token: str | None = None
    """The API token (``--token`` or ``MEDIC_TOKEN``)."""
    token_file: Path | None = None
    """A file holding the API token (``--token-file``); wins over ``token``."""

    @property
    def api_token(self) -> str | None:
        """The token to send: the file's first line, else ``token``."""
        if self.token_file is not None:
            lines = self.token_file.read_text(encoding="utf-8").strip().splitlines()
            return lines[0].strip() if lines else None
        return self.token.strip() if self.token else None

    @property
    def node_name(self) -> str:
        return self.node or socket.gethostname().split(".")[0]

    @property
    def detector_name(self) -> str:
        return self.detector or default_detector()

    def check(self) -> None:
        """Raises :class:`OptionError` naming the option that is wrong."""
        if self.api and not self.cluster:
            raise OptionError("--cluster", "required with --api")
        if not self.once and not self.api:
            raise OptionError("--api", "required unless --once")
        for option, value in (
            ("--node", self.node_name),
            ("--detector", self.detector_name),
            ("--cluster", self.cluster),
        ):
            if value is not None and not _NAME.fullmatch(value):
                raise OptionError(option, f"{value!r}: letters, digits and '._:@+-' only")
        if self.kernel != "none" and not self.once:
            try:
                make_follower(self.kernel).close()
            except ValueError as exc:
                raise OptionError("--kernel", str(exc)) from None
        if self.api:
            try:
                token = self.api_token
            except OSError as exc:
                raise OptionError("--token-file", f"cannot read it: {exc}") from None
            if not token:
                raise OptionError(
                    "--token", "an API token is required with --api (--token-file, MEDIC_TOKEN)"
                )

    def meta(self) -> dict[str, Any]:
        return {"node": self.node_name, "cluster": self.cluster, "detector": self.detector_name}


def _default_spool(cluster: str) -> Path:
    try:
        import platformdirs

        base = Path(platformdirs.user_state_dir("medic"))
    except ImportError:  # a node with the agent's own dependencies only
        base = Path.home() / ".local" / "state" / "medic"
    return base / "agent" / f"spool-{cluster}.jsonl"


def build_agent(
    config: AgentConfig, *, on_results: Callable[[list[CheckResult]], None] | None = None
) -> Agent:
    """The agent ``config`` describes (call :meth:`AgentConfig.check` first)."""
    thresholds = GpuThresholds(
        pcie_replays_per_minute=config.pcie_replays_per_minute,
        temperature_limit_c=config.temperature_limit,
    )
    checks: list[Check] = [
        GpuChecks(expected_gpus=config.gpus, thresholds=thresholds),
        FilesystemCheck(config.fs or ("/",), full_percent=config.fs_full_percent),
        InfinibandCheck(config.ib_root),
    ]
    follower: LineSource | None = None
    if not config.once and config.kernel != "none":
        follower = make_follower(config.kernel)
    sender = None
    if config.api and config.cluster:
        sender = AlertSender(
            config.api,
            cluster=config.cluster,
            node=config.node_name,
            detector=config.detector_name,
            token=config.api_token,
            spool=config.spool or _default_spool(config.cluster),
            timeout=config.timeout,
            refire_seconds=config.refire,
        )
    return Agent(
        checks,
        kernel=follower,
        classifier=KernelClassifier(config.node_name) if follower else None,
        sender=sender,
        interval=config.interval,
        on_results=on_results,
    )


def print_findings(
    results: list[CheckResult], meta: dict[str, Any], as_json: bool, *, lines: bool = False
) -> None:
    """Findings as one JSON document (``lines``: one compact JSON line) or as text rows."""
    if as_json:
        body = {**meta, "time": datetime.now(UTC).isoformat()}
        body["findings"] = [r.to_json() for r in results]
        json.dump(body, sys.stdout, default=str, indent=None if lines else 2)
        sys.stdout.write("\n")
    else:
        for r in results:
            sys.stdout.write(f"{r.status.value:<14} {r.key:<26} {r.summary}\n")
    sys.stdout.flush()


def run_until_signal(agent: Agent) -> None:
    """Run the loop until SIGINT or SIGTERM (restoring the previous handlers after)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        agent.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def execute(config: AgentConfig, as_json: bool) -> int:
    """Build and run the agent; the exit status (``--once``: 1 when a check fails)."""
    meta = config.meta()

    def show(results: list[CheckResult]) -> None:
        # While running: failing findings are logged, and printed as JSON lines with --json.
        failing = [r for r in results if r.status is CheckStatus.FAILING]
        for r in failing:
            logger.info("failing: %s: %s", r.key, r.summary)
        if failing and as_json:
            print_findings(failing, meta, as_json, lines=True)

    agent = build_agent(config, on_results=None if config.once else show)
    try:
        if config.once:
            results = agent.once()
            print_findings(results, meta, as_json)
            return 1 if any(r.status is CheckStatus.FAILING for r in results) else 0
        run_until_signal(agent)
        return 0
    finally:
        agent.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m medic.agent", description=__doc__)
    p.add_argument("--api", help="URL of the medic API, e.g. http://medic:8765")
    p.add_argument("--cluster")
    p.add_argument("--node")
    p.add_argument("--detector")
    p.add_argument(
        "--token",
        default=os.environ.get("MEDIC_TOKEN"),
        help="API token (default: $MEDIC_TOKEN); prefer --token-file",
    )
    p.add_argument("--token-file", type=Path, help="file holding the API token")
    p.add_argument("--kernel", default="kmsg", help="kmsg, journal, file:PATH or none")
    p.add_argument("--interval", type=float, default=30.0)
    p.add_argument("--fs", action="append", help="filesystem path to watch (repeat)")
    p.add_argument("--once", action="store_true")
    p.add_argument("--json", action="store_true", dest="as_json")
    p.add_argument("--gpus", type=int)
    p.add_argument("--spool", type=Path)
    p.add_argument("--refire", type=float, default=300.0)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--fs-full-percent", type=float, default=95.0)
    p.add_argument("--temperature-limit", type=float)
    p.add_argument("--pcie-replays-per-minute", type=float, default=8.0)
    p.add_argument("--ib-root", default="/sys/class/infiniband")
    p.add_argument("--log-level", default="warning")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = AgentConfig(
        api=args.api,
        cluster=args.cluster,
        node=args.node,
        detector=args.detector,
        kernel=args.kernel,
        interval=args.interval,
        fs=tuple(args.fs or ("/",)),
        once=args.once,
        gpus=args.gpus,
        spool=args.spool,
        refire=args.refire,
        timeout=args.timeout,
        fs_full_percent=args.fs_full_percent,
        temperature_limit=args.temperature_limit,
        pcie_replays_per_minute=args.pcie_replays_per_minute,
        ib_root=args.ib_root,
        token=args.token,
        token_file=args.token_file,
    )
    try:
        config.check()
    except OptionError as exc:
        print(f"medic agent: {exc}", file=sys.stderr)
        return 2
    return execute(config, args.as_json)
