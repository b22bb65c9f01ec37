"""The replay's exit codes and errors."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAG_DAMAGED = 3
EXIT_NO_PLANS = 4
EXIT_INTERRUPTED = 130


class ReplayUsageError(Exception):
    """Bad command line, parameters, topics or bag (exit code 2)."""


class ReplayModelError(Exception):
    """The model cannot be loaded (exit code 1)."""
