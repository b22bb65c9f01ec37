"""The replay's progress line on stderr."""

from __future__ import annotations

from typing import Any, TextIO


class Progress:
    """A tqdm bar over bag seconds on a terminal; otherwise a line at every 10 % of the window (or nothing)."""

    def __init__(self, total_s: float | None, mode: bool | None, stream: TextIO) -> None:
        self.total_s = total_s
        self.stream = stream
        self.bar: Any = None
        self.shown_s = -1.0
        self.latest: tuple[float, int, int, int] | None = None
        self.last_decile = -1
        self.lines = False
        if mode is False:
            return
        if stream.isatty() or mode is True:
            from tqdm import tqdm

            total = round(total_s, 1) if total_s else None
            self.bar = tqdm(total=total, unit="s", file=stream, desc="replay", bar_format=None, dynamic_ncols=True)
        else:
            self.lines = True

    def update(self, done_s: float, planned: int, valid: int, blocked: int) -> None:
        """Bag seconds replayed so far and the plan counts."""
        if self.total_s is not None:
            done_s = min(done_s, self.total_s)
        done_s = max(0.0, done_s)
        self.latest = (done_s, planned, valid, blocked)
        if done_s - self.shown_s < 0.099:
            return
        self.shown_s = done_s
        if self.bar is not None:
            self.bar.n = round(done_s, 1)
            self.bar.set_postfix(planned=planned, valid=valid, blocked=blocked, refresh=False)
            self.bar.refresh()
        elif self.lines:
            # every 10 % of the window, or every 10 s of bag time when its length is unknown
            step = int(10 * done_s / self.total_s) if self.total_s else int(done_s // 10)
            if step > self.last_decile:
                self.last_decile = step
                total = f" / {self.total_s:.1f}" if self.total_s else ""
                print(
                    f"replay: {done_s:6.1f}{total} s of bag time, {planned} planned ({valid} valid), {blocked} blocked",
                    file=self.stream,
                    flush=True,
                )

    def close(self) -> None:
        """Show the last state and finish the bar."""
        if self.bar is not None:
            if self.latest is not None:
                self.shown_s = -1.0
                self.update(*self.latest)
            self.bar.close()
