"""Code both services and the gateway import: config, DB models, messages, the transport.

Importing ``shared`` registers the ``pgsql://`` kombu transport alias (the
installed ``linectl-pgsql.pth`` already does so at interpreter start).
"""

import shared.transport.alias  # noqa: F401
