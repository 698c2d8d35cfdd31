"""The computer sandbox: a Linux workspace isolated from its host, shared by an episode's agents.

A `ComputerPool` (pool.py) is a sandbox pool whose instances are computers made from a
`Template` (template.py: files, a git repository, read-only host tools, `Limits`). An episode
claims one like any shared world; every agent's runner, on any host, reaches it through
`RunContext.sandbox` with a `Computer` (client.py): run commands (`CommandResult`), read and
write files, set marks, read its usage, all through a small API that answers only to the
claim's secret (server.py). Inside, each command runs under bubblewrap (bubblewrap.py): its own
filesystem view, process, network and IPC namespaces, within the computer's cgroups
(cgroups.py) and a wall-clock limit, on a disk of limited size (machine.py). The network is
loopback only; the addresses a command asks for are relayed in (relay.py).
"""

from rollout.sandboxes.computer.client import (
    CommandResult,
    Computer,
    ComputerError,
    computer_usage,
    is_computer,
    loopback_route,
    usage_line,
)
from rollout.sandboxes.computer.pool import ComputerPool
from rollout.sandboxes.computer.template import (
    HOME,
    WORKSPACE,
    InvalidTemplate,
    Limits,
    Template,
    node_tool,
    python_tool,
)

__all__ = [
    "HOME",
    "WORKSPACE",
    "CommandResult",
    "Computer",
    "ComputerError",
    "ComputerPool",
    "InvalidTemplate",
    "Limits",
    "Template",
    "computer_usage",
    "is_computer",
    "loopback_route",
    "node_tool",
    "python_tool",
    "usage_line",
]
