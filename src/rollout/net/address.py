"""Which address this machine's servers listen on, and which one they tell other machines about.

A server that another role calls (a sandbox instance, an inference server, a gateway) records
its address in the ledger, and a role on any machine may read it there. So it listens on an
address the other machines can reach, unless they all run here:

- `service_address()`: `ROLLOUT_HOST_ADDRESS` when set; else loopback while the ledger is
  reached through a Unix socket (the embedded Postgres: every role is on this machine); else
  `routable_address()`;
- `routable_address()`: the address of the interface that routes outward (the default route's),
  found without sending a packet; loopback on a machine with no route at all;
- `advertised(address)`: what to record for a server listening on `address`: a wildcard
  (`0.0.0.0`, `::`) is recorded as `routable_address()`.

Example:
    >>> from rollout.settings import Settings
    >>> service_address(Settings.from_environ({}))  # the embedded ledger: one machine
    '127.0.0.1'
    >>> service_address(Settings.from_environ({"ROLLOUT_HOST_ADDRESS": "10.1.2.3"}))
    '10.1.2.3'
    >>> advertised("10.1.2.3"), advertised("0.0.0.0") == routable_address()
    ('10.1.2.3', True)
"""

from __future__ import annotations

import socket

from rollout.settings import Settings, get_settings

LOOPBACK = "127.0.0.1"
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})
_PROBE = ("10.255.255.255", 9)
"""Any address off this machine: a UDP socket 'connected' to it takes the outward interface's
address, and nothing is sent."""


def routable_address() -> str:
    """The address of the interface that routes outward, else loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(_PROBE)
        except OSError:  # no route at all
            return LOOPBACK
        return str(probe.getsockname()[0])


def service_address(settings: Settings | None = None) -> str:
    """The address this machine's servers listen on (see the module docstring)."""
    settings = settings or get_settings()
    if settings.host_address:
        return settings.host_address
    return LOOPBACK if settings.one_machine else routable_address()


def advertised(address: str) -> str:
    """The address to record for a server listening on `address` (a wildcard: the routable
    one)."""
    return routable_address() if address in WILDCARDS else address
