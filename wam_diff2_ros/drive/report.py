"""``report.html`` of an episode: the score, a timeline, the bird's-eye view of the route with the ego's path and
every plan, the windows and the events; the data embedded with the replay page's escaping
(:func:`~wam_diff2_ros.core.markup.embed_json`), drawn client-side (``report_page.html``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.sim.road import ASPHALT_D, CENTRE_D, LEFT_EDGE_D, RIGHT_EDGE_D


def _r(values: Any, digits: int = 2) -> list:
    return np.round(np.asarray(values, float), digits).tolist()


def write_report(path: Path, document: dict[str, Any], episode: Any) -> Path:
    """Write the page for ``document`` (score.json's content) and ``episode``'s trace and plans."""
    from wam_diff2_ros.core.markup import embed_json, escape_text, fill_template, write_page

    trace, world = episode.trace, episode.world
    xs = [s.x for s in trace.states]
    ys = [s.y for s in trace.states]
    s_max = (episode.samples[-1]["s"] if episode.samples else 0.0) + 60.0
    s = np.arange(-10.0, min(world.road.length, s_max), 2.0)
    road = {}
    for name, d in (
        ("left", ASPHALT_D[1]),
        ("right", ASPHALT_D[0]),
        ("edge_r", RIGHT_EDGE_D),
        ("centre", CENTRE_D),
        ("edge_l", LEFT_EDGE_D),
        ("route", 0.0),
    ):
        x, y, _ = world.road.frenet_to_world(s, d)
        road[name] = [_r(x), _r(y)]
    obstacles = []
    t_end = trace.t[-1] if trace.t else 0.0
    for ob in world.obstacles:
        x, y, yaw = ob.actor.pose(0.0)
        x1, y1, yaw1 = ob.actor.pose(t_end)
        obstacles.append(
            {
                "x": [round(x, 2), round(x1, 2)],
                "y": [round(y, 2), round(y1, 2)],
                "yaw": [yaw, yaw1],
                "l": ob.half_length,
                "w": ob.half_width,
                "agent": ob.agent,
            }
        )
    score = document["score"]
    data = {
        "title": f"{document['scenario']['name']} (seed {document['scenario']['seed']})",
        "summary": _summary(document),
        "timeline": {
            "t": _r(trace.t, 2),
            "v": _r([st.v for st in trace.states]),
            "a": _r([st.a for st in trace.states]),
            "d": _r([g["d"] for g in episode.samples]),
            "on_road": [g["on_road"] for g in episode.samples],
        },
        "ego": [_r(xs), _r(ys)],
        "plans": [
            {
                "i": p.index,
                "t": round(p.t_s, 2),
                "eff": round(p.effective_s, 2),
                "valid": p.valid,
                "reason": p.reason,
                "latency_ms": round(p.latency_ms, 1),
                "command": p.command,
                "pts": _r(p.points),
            }
            for p in episode.plans
        ],
        "road": road,
        "obstacles": obstacles,
        "windows": [
            {k: w[k] for k in ("t0", "t1", "nc", "dac", "ep", "ttc", "c", "pdms", "progress_m", "reference_progress_m")}
            for w in score.get("windows", [])
        ],
        "events": score.get("events", []),
    }
    template = resources.files("wam_diff2_ros.drive").joinpath("report_page.html").read_text(encoding="utf-8")
    values = {"TITLE": escape_text(f"wam-diff2-drive: {data['title']}"), "DATA": embed_json(data)}
    return write_page(path, fill_template(template, values))


def _summary(document: dict[str, Any]) -> list[list[str]]:
    score, plans = document["score"], document["plans"]

    def num(value: Any, digits: int = 3) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    rows = [
        ["PDMS (mean over 4 s windows)", num(score.get("pdms"))],
        ["NC · DAC · EP · TTC · C", " · ".join(num(score.get(k), 2) for k in ("nc", "dac", "ep", "ttc", "c"))],
        ["completion (windows driven of those planned)", num(score.get("completion"), 2)],
        [
            "lane-centre deviation",
            f"mean {num(score.get('lane_deviation_m', {}).get('mean'), 2)} m, max "
            f"{num(score.get('lane_deviation_m', {}).get('max'), 2)} m",
        ],
        ["plans", f"{plans['made']} made, {plans['valid']} valid, {plans['used']} used, {plans['rejected']} rejected"],
        ["rejections", ", ".join(f"{n}× {r}" for r, n in plans["rejection_reasons"].items()) or "none"],
        [
            "latency",
            f"mean {num(plans['latency_ms']['mean'], 0)} ms "
            f"({'measured' if plans['latency_ms']['measured'] else 'configured'})",
        ],
        ["ended", document["stop_reason"]],
        ["simulated / wall", f"{document['simulated_s']:.1f} s / {document['wall_s']:.1f} s"],
        ["model", document["model"]],
        ["planner", document.get("planner", "model")],
    ]
    if score.get("why"):
        rows.insert(1, ["why", score["why"]])
    return rows
