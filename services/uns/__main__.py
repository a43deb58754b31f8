"""``python -m services.uns --name uns``: the plant's northbound publisher (``services.uns.publisher``)."""

from __future__ import annotations

import argparse
import logging
import sys

from shared.config import SettingsError, load_settings
from shared.logs import configure_logging
from shared.plant import PlantError, plant_of


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="uns", description="the plant's northbound MQTT publisher")
    parser.add_argument("--name", default="uns", help="the process's name (ps shows it)")
    parser.parse_args(argv)
    try:
        settings = load_settings()
        plant = plant_of(settings)
    except (SettingsError, PlantError) as exc:
        print(f"uns: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format, "uns")
    if not settings.mqtt_enabled:
        logging.getLogger("services.uns").warning("uns: LINECTL_MQTT_URL is not set; nothing to publish")
        return 0
    from services.uns.publisher import serve

    return serve(settings, plant)


if __name__ == "__main__":
    sys.exit(main())
