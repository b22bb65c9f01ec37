"""WAM-Diff2 as an egodriver policy over ``carla-driver-interface``'s contract (AlpaSim, CARLA): the policy
(:mod:`.policy`), one session's planner (:mod:`.session`), the plan in force and the stop (:mod:`.plan`), the
session's observations as the node's messages (:mod:`.messages`) and the settings (:mod:`.config`)."""
