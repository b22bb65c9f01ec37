"""The same episode with the planner node over DDS (:class:`DdsEpisode`, ``wam-diff2-drive --dds``): the simulator
as a ROS node that publishes ``/clock`` and the sensor topics of the sample bag (:data:`SIM_TOPICS`) and reads the
planner node's ``~/output/trajectory`` (base_link, valid or not).

Lock-step on simulated time: the planner node runs with ``use_sim_time`` and ``planning.rate_hz: 0`` (a plan on
each new front image when it is free). Where the in-process loop would plan (an image at t with the model free),
the simulator stops the clock and waits (wall time, at most ``dds_wait_s``) for the node's trajectory stamped t;
the plan then takes effect at t + ``--latency-ms`` as in-process. Every ``dds_resend_s`` without an answer the
image goes out again with its stamp, so a node that could not assemble an observation for it tries again (both
times in :class:`~wam_diff2_ros.drive.episode.EpisodeOptions`). Plans of other images are not used (the
in-process model is busy then). Everything else — world, renderer, controller, score, outputs — is the in-process
code.

Start: the pre-roll's odometry, acceleration and command (:data:`~wam_diff2_ros.drive.episode.PRE_ROLL_TICKS`)
go out with the clock before t=0, then the clock holds for half a second of wall time, so the first image finds
them at the node (without, a loaded machine could hand the node the first image before any odometry: no plan).

One model in both modes: the planner node must run the model the simulator's in-process episode would (the same
checkpoint, ``model.dtype`` and ``decoding.engine``: :func:`same_model_overrides`, which the closed-loop launch
file passes to the node); before the episode the simulator reads those parameters from the node and refuses one
that differs, naming both (:meth:`DdsEpisode.model_mismatch`).

Tolerance: the node assembles its observation when the image arrives; odometry of the same instant may arrive just
after it over DDS, and then the node extrapolates the pose and speed from the previous sample (20 ms earlier,
:mod:`wam_diff2_ros.core.frames`), so the speed written into the prompt can differ in its last digit. With a
deterministic model the two modes give the same plans but for such digits; the ego paths agree within a few
centimetres (``test/test_drive_dds.py`` checks 0.05 m over its episode with the scripted engine, and 0.2 m over 2 s
with the demo model, whose answer can change with that digit: measured 0.000 m and 0.062 m).
"""

from __future__ import annotations

import time
from typing import Any

from wam_diff2_ros.drive.episode import Episode
from wam_diff2_ros.sim.sample_bag import SAMPLE_TOPICS

SIM_NODE_NAME = "wam_diff2_sim"
SIM_TOPICS = {
    "image": SAMPLE_TOPICS["image_raw"],
    "camera_info": SAMPLE_TOPICS["camera_info"],
    "odometry": SAMPLE_TOPICS["odometry"],
    "acceleration": SAMPLE_TOPICS["acceleration"],
    "command": SAMPLE_TOPICS["command"],
}
BAG_TOPICS = {
    "image": "",  # the bag keeps the JPEG copy the recorder writes
    "camera_info": SAMPLE_TOPICS["camera_info"],
    "odometry": SAMPLE_TOPICS["odometry"],
    "acceleration": SAMPLE_TOPICS["acceleration"],
    "command": SAMPLE_TOPICS["command"],
}
PLANNER_TRAJECTORY = "/wam_diff2/output/trajectory"
MODEL_PARAMETERS = ("model.path", "model.dtype", "decoding.engine")  # what makes the node's model the episode's


def same_model_overrides(model: str, device: str | None = None) -> dict[str, str]:
    """The planner node parameters that make it run the model an in-process episode of ``--model model`` runs:
    the dtype and decoding engine resolved by the same rule (float32 on a CPU, else ``model.dtype``)."""
    from wam_diff2_ros.drive.planners import node_config

    config = node_config(model, device)
    return {"model.dtype": str(config.dtype), "decoding.engine": str(config.decode.engine)}


def _checkpoint(path: str) -> str:
    """A model name or path as the checkpoint directory it loads."""
    from pathlib import Path

    from wam_diff2_ros.demo.resolve import is_model_name, resolve_model

    if not path:
        return ""
    return str(Path(resolve_model(path) if is_model_name(path) else path).expanduser().resolve())


class DdsEpisode(Episode):
    """:class:`Episode` with the planner node over DDS (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        planner_topic: str = PLANNER_TRAJECTORY,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock

        from wam_diff2_ros.ros.outputs import own_messages

        msgs, problem = own_messages()
        if msgs is None:
            raise RuntimeError(f"the DDS mode needs the package's messages: {problem}")
        if not rclpy.ok():
            rclpy.init()
        self.node = rclpy.create_node(SIM_NODE_NAME)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.clock_pub = self.node.create_publisher(Clock, "/clock", reliable)
        self.publishers = {
            role: self.node.create_publisher(self.rows[role].msg_type, topic, reliable)
            for role, topic in SIM_TOPICS.items()
            if role in self.rows
        }
        self.trajectories: dict[int, Any] = {}
        self.node.create_subscription(msgs.PlannedTrajectory, planner_topic, self._on_trajectory, reliable)
        self.planner_topic = planner_topic
        self.last_image_ns: int | None = None
        self.last_camera: dict[str, Any] = {}  # the newest image and camera info messages, for a resend
        self.planned: set[int] = set()

    def _on_trajectory(self, msg: Any) -> None:
        from wam_diff2_ros.ros.conversions import stamp_to_ns

        self.trajectories[stamp_to_ns(msg.header.stamp)] = msg

    def wait_for_planner(self, timeout_s: float) -> bool:
        """True once the planner node subscribes to every sensor topic and publishes its trajectory."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.1)
            subscribed = all(self.node.count_subscribers(topic) >= 1 for topic in SIM_TOPICS.values())
            if subscribed and self.node.count_publishers(self.planner_topic) >= 1:
                return True
        return False

    def model_mismatch(self, config: Any, timeout_s: float = 10.0) -> str | None:
        """Why the planner node's model differs from ``config``'s (checkpoint, dtype, decoding engine), or None
        when it is the same (or the node does not answer its parameter service: then a warning)."""
        from rcl_interfaces.srv import GetParameters

        node_name = self.planner_topic.rsplit("/output/", 1)[0]
        client = self.node.create_client(GetParameters, f"{node_name}/get_parameters")
        try:
            if not client.wait_for_service(timeout_sec=timeout_s):
                self.log(f"warning: {node_name} has no parameter service: cannot check its model")
                return None
            names = list(MODEL_PARAMETERS)
            future = client.call_async(GetParameters.Request(names=names))
            self.executor.spin_until_future_complete(future, timeout_sec=timeout_s)
            if future.result() is None:
                self.log(f"warning: {node_name} did not say its model parameters: cannot check its model")
                return None
            node = {name: value.string_value for name, value in zip(names, future.result().values, strict=True)}
        finally:
            self.node.destroy_client(client)
        ours = {
            "model.path": str(config.model_path),
            "model.dtype": config.dtype,
            "decoding.engine": config.decode.engine,
        }
        theirs = {**node, "model.path": _checkpoint(node["model.path"])}
        ours["model.path"] = _checkpoint(ours["model.path"])
        differ = [k for k in MODEL_PARAMETERS if ours[k] != theirs[k]]
        if not differ:
            return None
        them = ", ".join(f"{k} {theirs[k]!r}" for k in differ)
        us = ", ".join(f"{k} {ours[k]!r}" for k in differ)
        return (
            f"the planner node {node_name} runs another model than this episode would in-process ({them} there; "
            f"{us} here): start it with the same model (closed_loop.launch.py does) or pass --set to match"
        )

    def _tick(self, now_ns: int) -> None:
        from rosgraph_msgs.msg import Clock

        from wam_diff2_ros.ros.conversions import ns_to_stamp

        self.clock_pub.publish(Clock(clock=ns_to_stamp(now_ns)))
        self.executor.spin_once(timeout_sec=0.0)

    def _settle(self, wall_s: float = 0.5) -> None:
        """Spin ``wall_s`` of wall time with the clock held, so the node has the pre-roll before the first image."""
        deadline = time.monotonic() + wall_s
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.05)

    def _feed(self, role: str, msg: Any, stamp_ns: int, topic: str) -> None:
        publisher = self.publishers.get(role)
        if publisher is not None:
            publisher.publish(msg)
        if role in ("image", "camera_info"):
            self.last_camera[role] = msg
        if role == "image":
            self.last_image_ns = stamp_ns
        if self.recorder is not None and BAG_TOPICS.get(role):
            self.recorder.write(BAG_TOPICS[role], msg, stamp_ns)

    def _plan(self, now_ns: int) -> None:
        self.pending = False
        stamp = self.last_image_ns
        if stamp is None or stamp in self.planned:
            return
        self.planned.add(stamp)
        started = resent = time.monotonic()
        while stamp not in self.trajectories and time.monotonic() - started < self.options.dds_wait_s:
            self.executor.spin_once(timeout_sec=0.05)
            if time.monotonic() - resent >= self.options.dds_resend_s:
                self._resend_camera(stamp, first=resent == started)
                resent = time.monotonic()
        msg = self.trajectories.get(stamp)
        wall_ns = round((time.monotonic() - started) * 1e9)
        latency_ns = round(self.options.latency_ms * 1e6) if self.options.latency_ms is not None else wall_ns
        self.busy_until_ns = now_ns + latency_ns
        if msg is None:
            self.log(f"warning: no trajectory from the planner for the image at t={self._t(stamp):.2f} s")
            reason = f"no plan from the node within {self.options.dds_wait_s:g} s"
            self._accept(now_ns, latency_ns, stamp, False, reason, "", [])
            return
        waypoints = [
            (p.time_from_start.sec + p.time_from_start.nanosec / 1e9, p.pose.position.x, p.pose.position.y)
            for p in msg.points
        ]
        self._accept(
            now_ns,
            latency_ns,
            stamp,
            bool(msg.valid),
            msg.invalid_reason,
            msg.navigation_command,
            waypoints if msg.valid else [],
        )
        if self.recorder is not None:
            self.recorder.output("trajectory", msg, now_ns + latency_ns)

    def _resend_camera(self, stamp_ns: int, first: bool) -> None:
        """Publish the image the simulator waits on (and its camera info) again, same stamp: a node that found no
        observation for it (its odometry had not arrived yet) plans on it again; one that already did is idle."""
        if first:
            self.log(f"note: no trajectory yet for the image at t={self._t(stamp_ns):.2f} s; sending it again")
        for role in ("camera_info", "image"):
            msg, publisher = self.last_camera.get(role), self.publishers.get(role)
            if msg is not None and publisher is not None:
                publisher.publish(msg)

    def close(self) -> None:
        self.executor.remove_node(self.node)
        self.node.destroy_node()
