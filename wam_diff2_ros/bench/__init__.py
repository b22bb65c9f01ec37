"""Decoder benchmark (`wam-diff2-bench`): `runs` measures engines stage by stage, `report` prints the table."""

from wam_diff2_ros.bench.report import print_figures
from wam_diff2_ros.bench.runs import BenchSettings, run

__all__ = ["BenchSettings", "print_figures", "run"]
