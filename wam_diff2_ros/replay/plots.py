"""Plots of a replay's plans and errors (matplotlib, Agg canvas, no display): :func:`plot_bev` and
:func:`plot_error_over_horizon`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.core.markup import plot_text, shorten
from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.replay.evaluation import HORIZONS_S, EgoTrack, PlanRecord, usable_waypoints

_REASON_WIDTH = 52  # characters per title line of a rejected plan's reason


def _figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _pick(n: int, count: int) -> list[int]:
    if n <= count:
        return list(range(n))
    return sorted({round(i * (n - 1) / (count - 1)) for i in range(count)}) if count > 1 else [0]


def plot_bev(
    predictions: Iterable[PlanRecord | Mapping[str, Any]],
    track: EgoTrack,
    path: str | Path,
    *,
    num_panels: int = 9,
    horizons_s: Sequence[float] = HORIZONS_S,
    title: str | None = None,
) -> Path:
    """Grid of bird's-eye views at evenly sampled instants: predicted vs actual future path.

    Each panel is the ego frame at the plan's stamp: ego at the origin, x (forward) up, y (left)
    to the left, equal aspect. Titles give the time, command, speed and errors. A plan the gate rejected is
    drawn dashed in red (from ``PlanRecord.rejected``) under the gate's reason. Writes a PNG.
    """
    if num_panels < 1:
        raise ValueError("num_panels must be at least 1")
    plans = [PlanRecord.coerce(p) for p in predictions]
    plans = [p for p in plans if track.pose_at(p.stamp_ns) is not None]
    if not plans:
        raise ValueError("no prediction falls inside the ego track; nothing to plot")
    chosen = [plans[i] for i in _pick(len(plans), num_panels)]
    cols = math.ceil(math.sqrt(len(chosen)))
    rows = math.ceil(len(chosen) / cols)
    fig = _figure(3.6 * cols, 4.3 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel()[len(chosen) :]:
        ax.set_visible(False)
    for ax, plan in zip(axes.ravel(), chosen, strict=False):
        truth = track.future_in_ego_frame(plan.stamp_ns, horizons_s)
        waypoints, reason = usable_waypoints(plan, len(horizons_s))
        rejected = _rejected(plan, len(horizons_s)) if waypoints is None else None
        points = [np.zeros((1, 2))]
        if truth is not None:
            ok = np.isfinite(truth).all(axis=1)
            actual = np.vstack([[0.0, 0.0], truth[ok]])
            ax.plot(actual[:, 1], actual[:, 0], "-o", color="black", ms=3.5, lw=1.8, label="actual future")
            points.append(actual)
        if waypoints is not None:
            pred = np.vstack([[0.0, 0.0], waypoints])
            ax.plot(pred[:, 1], pred[:, 0], "-s", color="tab:orange", ms=3.5, lw=1.8, label="predicted")
            points.append(pred)
        if rejected is not None:
            drawn = np.vstack([[0.0, 0.0], rejected])
            ax.plot(drawn[:, 1], drawn[:, 0], "--x", color="tab:red", ms=4, lw=1.6, label="rejected by the gate")
            points.append(drawn)
        ax.plot([0.0], [0.0], marker="^", color="tab:blue", ms=10, ls="none", label="ego (base_link)")
        allp = np.vstack(points)
        forward_hi = max(10.0, float(allp[:, 0].max()) + 3.0)
        forward_lo = min(-3.0, float(allp[:, 0].min()) - 3.0)
        lateral = max(6.0, float(np.abs(allp[:, 1]).max()) + 3.0, (forward_hi - forward_lo) / 2.4)
        ax.set_xlim(lateral, -lateral)  # y (left) points to the left of the panel
        ax.set_ylim(forward_lo, forward_hi)
        ax.set_aspect("equal", adjustable="box")
        ax.grid(True, lw=0.4, alpha=0.6)
        ax.set_xlabel("y [m] (left +)", fontsize=8)
        ax.set_ylabel("x [m] (forward +)", fontsize=8)
        ax.tick_params(labelsize=7)
        rel = (plan.stamp_ns - track.start_ns) / NS_PER_S
        speed = plan.speed if plan.speed is not None else track.speed_at(plan.stamp_ns)
        speed_text = f"{speed:.1f} m/s" if speed is not None else "? m/s"
        lines = [f"t={rel:.1f} s (stamp {plan.stamp_ns / NS_PER_S:.2f})", f"cmd: {plan.command or '?'}, v={speed_text}"]
        if waypoints is None:
            why = shorten(str(plan.reason or reason or "plan marked invalid"), 300)
            lines += textwrap.wrap(f"{'REJECTED' if rejected is not None else 'INVALID'}: {why}", _REASON_WIDTH)
        elif truth is not None:
            err = np.linalg.norm(waypoints - truth, axis=1)
            ok = np.isfinite(err)
            if ok.all():
                lines.append(f"ADE {err.mean():.2f} m, FDE {err[-1]:.2f} m")
            elif ok.any():
                lines.append(f"ADE {err[ok].mean():.2f} m over {int(ok.sum())} pts (bag ends)")
            else:
                lines.append("no future in the bag")
        ax.set_title(plot_text("\n".join(lines), None), fontsize=8)
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    for ax in axes.ravel()[1 : len(chosen)]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9)
    fig.suptitle(plot_text(title or "Predicted vs actual future (ego frame at plan time)"), fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    return _save(fig, path)


def _rejected(plan: PlanRecord, count: int) -> np.ndarray | None:
    """The waypoints of a rejected plan if it has `count` finite ones."""
    if plan.rejected is None:
        return None
    points = np.asarray(plan.rejected, float)
    return points if points.shape == (count, 2) and np.isfinite(points).all() else None


def plot_error_over_horizon(metrics: Mapping[str, Any], path: str | Path, *, title: str | None = None) -> Path:
    """Mean L2 error per waypoint time (all instants and per command) from :func:`compute_metrics`."""
    curve = metrics.get("error_curve")
    if not curve:
        raise ValueError("metrics has no 'error_curve' (use compute_metrics)")
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)

    def draw(points: Sequence[Mapping[str, Any]], label: str, **style: Any) -> None:
        t = [p["t"] for p in points if p["mean_l2"] is not None]
        e = [p["mean_l2"] for p in points if p["mean_l2"] is not None]
        if t:
            ax.plot(t, e, marker="o", label=plot_text(label), **style)

    draw(curve, f"all (n={metrics.get('num_valid', '?')})", color="black", lw=2.2)
    for command, group in (metrics.get("by_command") or {}).items():
        draw(group["error_curve"], f"{command} (n={group['count']})", lw=1.2, alpha=0.85)
    for p in curve:
        if p["mean_l2"] is not None:
            ax.annotate(
                f"{p['count']}",
                (p["t"], p["mean_l2"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color="dimgray",
            )
    ax.set_xlabel("time into the plan t [s]")
    ax.set_ylabel("mean L2 error [m]")
    ax.set_xlim(0, max(p["t"] for p in curve) + 0.25)
    ax.set_ylim(bottom=0)
    ax.grid(True, lw=0.4, alpha=0.6)
    ax.legend(fontsize=8)
    summary = []
    for name in ("ade", "fde"):
        if metrics.get(f"{name}_4s") is not None:
            summary.append(f"{name.upper()}@4s {metrics[f'{name}_4s']:.2f} m")
    if metrics.get("invalid_rate") is not None:
        summary.append(f"invalid {100 * metrics['invalid_rate']:.0f}%")
    heading = title or "Planning error over the horizon (labels: instants per point)"
    ax.set_title(plot_text(heading) + ("\n" + ", ".join(summary) if summary else ""), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
