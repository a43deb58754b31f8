"""A product's ideal cycle time (``idealCycleSeconds`` in the layout's product):
OEE's performance (docs/oee.md). Read from the layout as written; the plant
file's check calls it, so a bad value stops start-up with one line."""

from __future__ import annotations

from shared.layout import Layout, LayoutError


def product_ideal_seconds(layout: Layout) -> dict[str, float | None]:
    """Each product's ``idealCycleSeconds`` (the line's time per good piece at its
    rated speed), None where the layout gives none; LayoutError for a bad value."""
    ideals = {}
    for n, product in enumerate(layout.raw.get("products") or []):
        value = product.get("idealCycleSeconds") if isinstance(product, dict) else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 < value <= 86400):
            raise LayoutError(f"products[{n}]: idealCycleSeconds must be more than 0 and at most 86400")
        ideals[str(product["id"])] = None if value is None else float(value)
    return ideals
