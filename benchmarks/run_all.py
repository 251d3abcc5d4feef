"""Every benchmark in one command (``make bench``): each ``bench_*.py`` here runs in turn with its
own defaults, its progress goes to stderr, and the last line of stdout is one JSON object mapping
each benchmark to its own last-line JSON (or to ``{"error": ...}`` when it failed or printed none).

``--only api,repair`` runs a subset; ``--skip slurm_recovery`` leaves some out; arguments after
``--`` go to each benchmark whose ``--help`` names every option among them (e.g. ``-- --quick``
reaches those that have a quick mode; the others run as usual). A benchmark that needs
something absent (a local Slurm, PostgreSQL) says so in its own output and skips that part.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _names() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def _accepts(script: Path, extra: list[str]) -> bool:
    """True when the benchmark's ``--help`` names every ``--option`` in ``extra``."""
    options = [arg.split("=", 1)[0] for arg in extra if arg.startswith("--")]
    if not options:
        return True
    shown = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False
    ).stdout
    return all(option in shown for option in options)


def _run(name: str, extra: list[str], timeout: float) -> dict[str, object]:
    script = HERE / f"bench_{name}.py"
    command = [sys.executable, str(script), *(extra if _accepts(script, extra) else [])]
    print(f"== {name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    seconds = round(time.monotonic() - started, 1)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        figures = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        figures = None
    if done.returncode != 0 or not isinstance(figures, dict):
        return {"error": f"exit {done.returncode}, no JSON last line", "seconds": seconds}
    return {**figures, "wall_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated names, e.g. api,repair")
    parser.add_argument("--skip", default="", help="comma-separated names to leave out")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per benchmark")
    opts = parser.parse_args(args)
    names = _names()
    if opts.only:
        wanted = set(opts.only.split(","))
        unknown = wanted - set(names)
        if unknown:
            parser.error(f"no benchmark named {sorted(unknown)}; there are {names}")
        names = [n for n in names if n in wanted]
    names = [n for n in names if n not in set(opts.skip.split(","))]
    results = {name: _run(name, extra, opts.timeout) for name in names}
    print(json.dumps(results, sort_keys=True))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
