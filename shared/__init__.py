"""Code both services and the gateway import: config, DB models, messages, the transport.

Importing ``shared`` registers the ``pgsql://`` kombu transport alias, so any
process of the project (and a plain kombu program after ``import shared``)
resolves ``pgsql://`` URLs.
"""

from kombu.transport import TRANSPORT_ALIASES

TRANSPORT_ALIASES.setdefault("pgsql", "shared.transport.pgsql:Transport")
