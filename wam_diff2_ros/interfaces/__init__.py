"""Building the package's ROS 2 message interfaces on the pip route (see `build.py`)."""
