"""The ``linectl`` sub-commands, one module each, with ``run(settings, args)``:
``up``, ``migrate``, ``shell``, ``retention`` (``purge`` and ``retention``),
``backup`` (``backup`` and ``restore``), ``sim``; ``database`` finds or starts
the database they work on. ``services/stack/cli.py`` holds the argparse wiring."""
