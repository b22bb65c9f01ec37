"""What every console script shares: its parser (usage errors as one line, exit 2), argument checks, error and
warning lines (``<prog>: error: ...`` on stderr), the exit codes every command uses, and ``--json`` output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """``argparse`` whose usage errors are one line, ``<prog>: error: <message> (see <prog> --help)``, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """The parsed arguments, or the exit code when parsing ended the command (``--help`` 0, a usage error 2)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE


def error(prog: str, message: object) -> None:
    """``<prog>: error: <message>`` on stderr."""
    print(f"{prog}: error: {message}", file=sys.stderr)


def warning(prog: str, message: object) -> None:
    """``<prog>: warning: <message>`` on stderr."""
    print(f"{prog}: warning: {message}", file=sys.stderr)


def below_minimum(args: argparse.Namespace, **minimums: float) -> list[str]:
    """The argument checks: each ``name=minimum`` whose value in ``args`` is below it, as ``--name must be >=
    minimum, got value`` (None values are not checked)."""
    problems = []
    for name, minimum in minimums.items():
        value = getattr(args, name)
        if value is not None and value < minimum:
            problems.append(f"--{name.replace('_', '-')} must be >= {minimum:g}, got {value:g}")
    return problems


def refuse(prog: str, problems: Sequence[str]) -> int | None:
    """Each problem as an error line and :data:`EXIT_USAGE`; None when there is none."""
    for problem in problems:
        error(prog, problem)
    return EXIT_USAGE if problems else None


def write_json(path: Path | None, value: Any) -> None:
    """``value`` as indented JSON at ``path`` (nothing when ``path`` is None)."""
    if path is not None:
        path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def tolerant_output() -> None:
    """Let stdout and stderr print any text: a character the terminal cannot encode (a lone surrogate from a file
    name or a scenario) is written as its backslash escape instead of failing the command after its work."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")
