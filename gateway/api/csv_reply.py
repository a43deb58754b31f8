"""``Accept: text/csv`` for the read views that offer it (OEE, stops, pieces):
whether the client asked for CSV, and the rows streamed as a download."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from flask import Response, request, stream_with_context

CHUNK_ROWS = 100  # rows per chunk written: constant memory, few writes


def wants_csv() -> bool:
    return request.accept_mimetypes.best_match(["application/json", "text/csv"]) == "text/csv"


def csv_response(rows: Iterable[Sequence], columns: Sequence[str], name: str) -> Response:
    """``columns``, then ``rows`` (read lazily, so a keyset scan streams), as ``name.csv``."""

    def chunks():
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(columns)
        for n, row in enumerate(rows, 1):
            writer.writerow(row)
            if n % CHUNK_ROWS == 0:
                yield out.getvalue()
                out.seek(0)
                out.truncate()
        yield out.getvalue()

    return Response(stream_with_context(chunks()), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})


def by_columns(items: Iterable[dict], columns: Sequence[str]) -> Iterable[list]:
    """Each item's values in ``columns`` order, an absent or null one empty."""
    return (["" if item.get(c) is None else item.get(c) for c in columns] for item in items)
