"""What starts the stack: the ``linectl`` command (cli.py), the supervisor of
``linectl up`` (supervisor.py, processes.py, readiness.py), one nameko service
per process (run_service.py), ``linectl shell``'s helpers (shell.py) and the
project's migrations run (migrate.py). It sits above what it starts; ``shared/``
imports nothing from here."""
