"""Closed-loop driving on the package's simulator: the node's :class:`~wam_diff2_ros.ros.runtime.PlannerRuntime`
plans from the camera rendered at the simulated ego's true pose, a tracking controller follows its plans, and the
episode is scored with NAVSIM's PDM score terms (``wam-diff2-drive``; docs/closed_loop.md).

Modules: :mod:`~.world` (scenario files, the world), :mod:`~.vehicle` (kinematic bicycle), :mod:`~.controller`
(pure pursuit + PI), :mod:`~.messages` (sensor messages), :mod:`~.episode` (the loop), :mod:`~.score` (PDMS),
:mod:`~.record` (bag, video), :mod:`~.report` (report.html), :mod:`~.run` (an episode to its outputs).
"""
