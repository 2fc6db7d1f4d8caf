"""
Every admin command in one table (S11.1): the one the admin service answers from, the
HTTP admin API maps its routes onto and C{mqgate cmd --help} lists.
"""

from mqgate.admin.broker_commands import COMMANDS as BROKER_COMMANDS
from mqgate.admin.captures import COMMANDS as CAPTURE_COMMANDS
from mqgate.admin.destinations import COMMANDS as DESTINATION_COMMANDS
from mqgate.admin.requests import reload_commands
from mqgate.admin.show import COMMANDS as SHOW_COMMANDS
from mqgate.metrics.commands import COMMANDS as METRICS_COMMANDS

__all__ = ["admin_commands"]

#: What C{reload} re-reads in a broker with its user file and its access rules.
USUAL_RELOADABLES = ("rules", "users")


def admin_commands(reloadables=USUAL_RELOADABLES):
    """C{(verb, object) -> Command} of every admin command.

    @param reloadables: the names C{reload NAME} accepts (what this broker can re-read).
    """
    return {**DESTINATION_COMMANDS, **BROKER_COMMANDS, **METRICS_COMMANDS,
            **SHOW_COMMANDS, **CAPTURE_COMMANDS, **reload_commands(reloadables)}
