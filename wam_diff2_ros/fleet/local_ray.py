"""The embedded Ray kept to this machine (:func:`local_ray_environment`): its node on the loopback address, so
every port it opens (GCS, raylet, object manager, workers, agents, the driver) listens on 127.0.0.1 only, and
token authentication with a token made for the run, in a file only its user can read.

Ray 2.60 chooses the node's address once, in ``ray._private.services.get_node_ip_address``: the machine's network
address, unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (read when ``ray`` is imported) says the node is for this
machine only, when it is 127.0.0.1 and its gRPC servers and agents bind there. ``ray.init(_node_ip_address=
"127.0.0.1")`` alone is not enough: Ray replaces a loopback address with the network one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOOPBACK = "127.0.0.1"
#: The environment the embedded Ray starts with (besides the token file's path).
LOCAL_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", TOKEN_PATH_ENV)


def write_token(folder: Path) -> Path:
    """A new random token (256 bits, hex) in ``folder/token``, readable and writable by its user only."""
    path = folder / "token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def _reload_auth_config() -> None:
    """Make this process's Ray core read the authentication settings from the environment again."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")  # first the mode, then the token (the order Ray's own tests reset them in)
    AuthenticationTokenLoader.instance().reset_cache()


@contextmanager
def local_ray_environment() -> Iterator[Path]:
    """For the block: Ray's node on 127.0.0.1 and token authentication with a new token (its path is yielded);
    the environment as it was, and the token deleted, after."""
    from ray._private import ray_constants

    folder = Path(tempfile.mkdtemp(prefix="wam-diff2-ray-"))  # mode 0700
    saved_env = {k: os.environ.get(k) for k in (*LOCAL_ENV, *_AUTH_ENV)}
    saved_cluster = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)  # None: a Ray without the switch
    try:
        token = write_token(folder)
        os.environ.pop("RAY_AUTH_TOKEN", None)  # a token in the environment would win over the file
        os.environ.update({**LOCAL_ENV, TOKEN_PATH_ENV: str(token)})
        if saved_cluster is not None:
            ray_constants.ENABLE_RAY_CLUSTER = False  # the import-time reading of the variable above
        _reload_auth_config()
        yield token
    finally:
        if saved_cluster is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved_cluster
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reload_auth_config()
        shutil.rmtree(folder, ignore_errors=True)
