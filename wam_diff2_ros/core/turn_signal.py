"""The route's turn signal as a navigation command (``command.source: turn_indicators``).

Autoware has no left/straight/right topic, but its planning publishes the turn signal it will use along the
route (``autoware_vehicle_msgs/TurnIndicatorsCommand``, ahead of turns). That is an approximation of a route
command: lane changes signal too, and a turn is signalled only shortly before it. The mapping:

* ``ENABLE_LEFT`` (2) → left, ``ENABLE_RIGHT`` (3) → right, at once;
* ``DISABLE`` (1) and ``NO_COMMAND`` (0) → straight, but only once they have lasted ``hold_s`` (by the
  messages' stamps): a blinking or briefly dropped signal does not flip a held turn back to straight;
* any other value is refused (:func:`signal_command` raises ``ValueError``).

The resulting command then follows the usual staleness rule (``command.max_age_s``, by the latest message's
stamp) like a command from the topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .prompts import NavigationCommand
from .units import NS_PER_S

#: Autoware's TurnIndicatorsCommand constants → the command each one asks for.
SIGNAL_COMMANDS: dict[int, NavigationCommand] = {
    0: NavigationCommand.STRAIGHT,  # NO_COMMAND
    1: NavigationCommand.STRAIGHT,  # DISABLE
    2: NavigationCommand.LEFT,  # ENABLE_LEFT
    3: NavigationCommand.RIGHT,  # ENABLE_RIGHT
}
DEFAULT_HOLD_S = 1.0


def signal_command(value: int) -> NavigationCommand:
    """The command a ``TurnIndicatorsCommand.command`` value asks for; ``ValueError`` for an unknown value."""
    if value not in SIGNAL_COMMANDS:
        raise ValueError(
            f"TurnIndicatorsCommand.command {value} is not one of NO_COMMAND 0, DISABLE 1, ENABLE_LEFT 2, "
            "ENABLE_RIGHT 3"
        )
    return SIGNAL_COMMANDS[value]


@dataclass
class CommandHold:
    """A held navigation command: a turn takes effect at once, straight only once it has lasted ``hold_s`` (by
    the stamps), so a blinking signal or a route that briefly looks straight does not flip a held turn back.
    Shared by the turn-signal source and the route source (``core/route_command.py``)."""

    hold_s: float = DEFAULT_HOLD_S
    _command: NavigationCommand | None = field(default=None, init=False)
    _straight_since_ns: int | None = field(default=None, init=False)

    @property
    def command(self) -> NavigationCommand | None:
        """The command held now (None before the first update)."""
        return self._command

    def update_command(self, wanted: NavigationCommand, stamp_ns: int) -> NavigationCommand:
        """Take the command ``wanted`` stamped ``stamp_ns``; return the command now held."""
        if wanted is not NavigationCommand.STRAIGHT or self._command in (None, NavigationCommand.STRAIGHT):
            self._command, self._straight_since_ns = wanted, None
            return wanted
        since = self._straight_since_ns
        if since is None or stamp_ns < since:  # first "straight" after a turn (or time went back: start again)
            self._straight_since_ns = since = stamp_ns
        if stamp_ns - since >= self.hold_s * NS_PER_S:
            self._command, self._straight_since_ns = NavigationCommand.STRAIGHT, None
        return self._command

    def reset(self) -> None:
        """Forget the held command."""
        self._command, self._straight_since_ns = None, None


@dataclass
class TurnSignalHold(CommandHold):
    """The command held from a stream of turn signals (see the module docstring)."""

    def update(self, value: int, stamp_ns: int) -> NavigationCommand:
        """Take the signal ``value`` stamped ``stamp_ns``; return the command now held (``ValueError`` for an
        unknown value, which changes nothing)."""
        return self.update_command(signal_command(value), stamp_ns)
