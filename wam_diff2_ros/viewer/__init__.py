"""The live view over Foxglove's WebSocket protocol, served by the node (``viewer.port``) and the replay
(``wam-diff2-replay --serve``): :class:`LiveView` (the server and its drawing thread, :mod:`.live`) fed with
:class:`PlanUpdate` (:mod:`.scene`). ROS-free; needs the ``foxglove-sdk`` package (extra ``viewer``) only
when a view is started. See docs/viewer.md.
"""

from .live import TOPICS, LiveView, ViewerSettings, ViewerUnavailableError
from .scene import PlanUpdate, ViewFrame, view_frame

__all__ = ["TOPICS", "LiveView", "PlanUpdate", "ViewFrame", "ViewerSettings", "ViewerUnavailableError", "view_frame"]
