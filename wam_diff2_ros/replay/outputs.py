"""The replay's output files while it runs: the output bag (the node's output topics, optional input copies),
``predictions.jsonl`` and ``detections.jsonl``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from wam_diff2_ros.replay.records import json_line
from wam_diff2_ros.replay.settings import RunPlan
from wam_diff2_ros.replay.topics import BAG_DIR_NAME, OUTPUT_TOPICS, TF_TOPICS, TopicMap


class Outputs:
    """The output bag, predictions.jsonl and detections.jsonl."""

    def __init__(self, plan: RunPlan, config: Any, runtime: Any, reader: Any, topic_map: TopicMap) -> None:
        from wam_diff2_ros.bag import BagWriter
        from wam_diff2_ros.ros import qos
        from wam_diff2_ros.ros.outputs import output_types

        out = plan.out
        self.bag = BagWriter(
            out / BAG_DIR_NAME,
            compress=True,
            custom_data={"generator": "wam_diff2_ros.replay", "source_bag": str(Path(reader.path).resolve())},
        )
        self.declared: set[str] = set()
        self.copied: set[str] = set()
        self.skipped_copies: list[str] = []
        try:
            # what the node publishes
            types = output_types(runtime.msgs, runtime.vision_msgs, config.debug_image, runtime.autoware_msgs)
            for name in OUTPUT_TOPICS:
                if name in types and (name != "detections" or plan.detect):
                    self._declare(name, types[name], qos.publisher_qos(name))
            if plan.copy_inputs:
                for topic in [*topic_map.inputs(), *[t for t in TF_TOPICS if t in reader.topics]]:
                    info = reader.topics[topic]
                    try:
                        self.bag.add_topic(topic, info.msgtype, info.qos[0] if info.qos else None)
                        self.copied.add(topic)
                    except Exception as exc:  # no definition for an exotic type: the replay goes on without it
                        self.skipped_copies.append(f"{topic}: {exc}")
            self.predictions = (out / "predictions.jsonl").open("w", encoding="utf-8")
            self.detections = (out / "detections.jsonl").open("w", encoding="utf-8") if plan.detect else None
        except BaseException:
            self.bag.close()
            raise

    def _declare(self, name: str, msgtype: Any, qos_profile: Any) -> None:
        self.bag.add_topic(OUTPUT_TOPICS[name], msgtype, qos_profile)
        self.declared.add(name)

    def write_output(self, name: str, msg: Any, t_ns: int) -> None:
        """One output message at bag time ``t_ns`` (skipped when None or the topic is not declared)."""
        if msg is not None and name in self.declared:
            self.bag.write(OUTPUT_TOPICS[name], msg, t_ns)

    def line(self, stream: TextIO | None, record: Mapping[str, Any]) -> None:
        """Append one JSON line and flush (a crash keeps every finished instant)."""
        if stream is not None:
            stream.write(json_line(record) + "\n")
            stream.flush()

    def output_counts(self) -> dict[str, int]:
        """Messages written per output topic."""
        return {name: self.bag.counts.get(OUTPUT_TOPICS[name], 0) for name in sorted(self.declared)}

    def close(self) -> None:
        """Close the files and finish the bag (index, metadata.yaml)."""
        self.predictions.close()
        if self.detections is not None:
            self.detections.close()
        self.bag.close()
