"""`wam-diff2-build-interfaces` (also `python -m wam_diff2_ros.cli.build_interfaces`): build this package's
ROS 2 messages into the virtualenv; the work is `wam_diff2_ros.interfaces.build`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.interfaces.build import (
    INTERFACES_PYTHON_DIR,
    BuildError,
    build_interfaces,
    find_source_dir,
    fix_exported_include_dirs,
    python_include_dirs,
    uninstall,
)

PROG = "wam-diff2-build-interfaces"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = toolkit.Parser(
        prog=PROG,
        description="Build wam_diff2_ros' ROS 2 messages into this virtualenv (PyPI ROS 2 wheels).",
    )
    parser.add_argument("--source", type=Path, help="package checkout (default: this checkout or cwd)")
    parser.add_argument("--prefix", type=Path, default=Path(sys.prefix), help="install prefix (default: venv)")
    parser.add_argument("--build-dir", type=Path, help="default: <source>/build/interfaces")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 2, help="parallel jobs")
    parser.add_argument("--clean", action="store_true", help="delete the build directory first")
    parser.add_argument("--no-fix-cmake", action="store_true", help="do not rewrite the wheels' exported .cmake files")
    parser.add_argument("--uninstall", action="store_true", help="remove a previous install and exit")
    parser.add_argument(
        "--fix-cmake-only",
        action="store_true",
        help="only rewrite the wheels' exported .cmake include dirs (before a colcon build) and exit",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``wam-diff2-build-interfaces``."""
    args = parse_args(argv)
    try:
        if args.fix_cmake_only:
            changed = fix_exported_include_dirs(Path(sys.prefix), *python_include_dirs())
            print(f"exported CMake include dirs: {len(changed)} file(s) in {sys.prefix} rewritten to this venv")
            return 0
        prefix = args.prefix.resolve()
        if prefix == Path(sys.base_prefix).resolve() and sys.prefix == sys.base_prefix:
            raise BuildError(
                f"refusing to install into the system prefix {prefix}: run this with a virtualenv's "
                "Python, or pass --prefix explicitly to a different directory."
            )
        if args.build_dir is not None:
            build_dir = args.build_dir.resolve()
        else:
            build_dir = find_source_dir(args.source) / "build" / "interfaces"
        if args.uninstall:
            count = uninstall(build_dir, prefix)
            print(f"removed {count} installed file(s) and {prefix / INTERFACES_PYTHON_DIR}")
            return 0
        build_interfaces(
            find_source_dir(args.source),
            prefix,
            build_dir,
            args.jobs,
            clean=args.clean,
            fix_cmake=not args.no_fix_cmake,
        )
    except BuildError as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
