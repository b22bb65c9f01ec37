"""ROS 2 layer: the lifecycle node, message conversion, QoS and diagnostics.

Modules:

* :mod:`.node` — ``wam_diff2_node`` (lifecycle node, thin wiring; ``main()``);
* :mod:`.runtime` — :class:`~.runtime.PlannerRuntime`: messages in → output messages out, no rclpy node;
* :mod:`.conversions` — ROS messages → core samples / RGB arrays (OpenCV, cv_bridge's table), RGB → Image;
* :mod:`.outputs` — results → Path, PlannedTrajectory, MarkerArray, DetectionArray, Detection2DArray;
* :mod:`.debug_image` — the ``~/debug/image`` drawing;
* :mod:`.diagnostics` — health bookkeeping → ``/diagnostics``;
* :mod:`.params` — parameter table, validation (:class:`~.params.NodeConfig`), YAML loading;
* :mod:`.param_guard` — typed declarations derived from the table and the on-set guard (live / reconfigure);
* :mod:`.qos`, :mod:`.dds` — QoS profiles, the Fast DDS profile variable.

Replaying a bag through exactly the node's path (no DDS)::

    from wam_diff2_ros.ros.params import NodeConfig, load_parameters_file
    from wam_diff2_ros.ros.runtime import PlannerRuntime
    from wam_diff2_ros.ros.node import load_engine

    config = NodeConfig.from_parameters({**load_parameters_file("config/wam_diff2.yaml"), "model.path": ckpt})
    runtime = PlannerRuntime(config, load_engine(config), clock=lambda: bag_now_ns)
    # for each bag message in receive order: runtime.on_image(0, msg, t) / on_compressed_image /
    #   on_camera_info / on_odometry / on_acceleration / on_command / on_driving_command
    # at each planning instant (t0 + k / planning.rate_hz in bag time, or each front image when 0):
    #   cycle = runtime.plan(t)  -> cycle.path, cycle.trajectory, cycle.markers, cycle.debug_image,
    #                                cycle.problems (why no plan), cycle.idle (nothing new)
    # detection instants: runtime.detect(t); questions: runtime.answer(text, t)
"""
