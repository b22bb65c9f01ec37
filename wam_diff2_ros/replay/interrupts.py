"""Ctrl-C / SIGTERM held back while one instant's outputs are written (:class:`InterruptGate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class InterruptGate:
    """Ctrl-C / SIGTERM as ``KeyboardInterrupt``, held back while one instant's outputs are being written.

    With the gate installed (``install``, main thread only) a signal that arrives inside ``held()`` is raised
    when the block ends, so ``predictions.jsonl`` and the output bag always hold the same instants.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending: str | None = None

    def held(self) -> InterruptGate:
        """Context manager: a signal inside is raised at its end."""
        return self

    def __enter__(self) -> InterruptGate:
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and self._pending is not None and exc_type is None:
            reason, self._pending = self._pending, None
            raise KeyboardInterrupt(reason)

    def interrupt(self, signum: int, frame: Any) -> None:
        """The signal handler."""
        if self._depth > 0:
            self._pending = f"signal {signum}"
            return
        raise KeyboardInterrupt(f"signal {signum}")

    def install(self) -> dict[int, Any]:
        """Handle SIGINT and SIGTERM (``timeout``, a cancelled job) with the gate; returns the previous handlers."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return {}
        self._pending = None
        return {sig: signal.signal(sig, self.interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def restore(previous: Mapping[int, Any]) -> None:
        """Put the handlers ``install`` replaced back."""
        import signal

        for sig, handler in previous.items():
            signal.signal(sig, handler)


INTERRUPTS = InterruptGate()
