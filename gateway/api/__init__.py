"""One blueprint per area. Each module exposes ``blp`` (a flask-smorest Blueprint)."""

from importlib import import_module

# Areas in registration order; a module that does not exist yet is skipped.
AREAS = ("health", "session", "orders", "jobs", "line", "alarms", "stats", "manual", "events", "ai", "runtime", "admin")


def register_blueprints(api) -> None:
    for area in AREAS:
        try:
            module = import_module(f"gateway.api.{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gateway.api.{area}":
                continue
            raise
        api.register_blueprint(module.blp)
