"""``linectl export pieces --from --to --format csv|jsonl [--output FILE] [--line ID]``:
the piece records (PRODUCT.md, "Piece traceability") of the pieces made in a
window (``createdAt`` in ``[from, to)``), every line's or one line's, as an
archive file: CSV (one row a piece, its steps and history as JSON columns: the
rows ``Accept: text/csv`` gives) or JSON Lines (one whole record a line).

Read in keyset batches (``shared.piece_query.records``), each in a short
transaction of its own, so an export of years runs in constant memory and holds
nothing up. The file is written as ``FILE.partial`` and renamed at the end: a
file under its name is whole. On a terminal, a progress bar on stderr; quiet
otherwise (a timer's, a pipe's)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from services.stack.commands.database import database_url, stop_if_started
from shared import piece_query as pq
from shared.config import Settings
from shared.db.engine import make_engine
from shared.db.lines import PUBLIC, placement
from shared.plant import PlantError, plant_of

BATCH = 1000


class Progress:
    """``[#####-----] 1200/5000 pieces`` on a terminal's stderr, redrawn in place."""

    WIDTH = 30

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.shown = stream.isatty()
        self._last = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        filled = self.WIDTH * self.done // max(self.total, 1)
        if self.shown and (filled != self._last or self.done == self.total):
            self._last = filled
            self.stream.write(f"\r[{'#' * filled}{'-' * (self.WIDTH - filled)}] {self.done}/{self.total} pieces")
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _instant(name: str, raw: str) -> datetime:
    try:
        when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PlantError(f"--{name}: not an ISO-8601 time: {raw!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def run_export(settings: Settings, args) -> int:
    start, end = _instant("from", args.from_), _instant("to", args.to)
    if start >= end:
        raise PlantError("--from: must be before --to")
    plant = plant_of(settings)
    line_ids = plant.line_ids if args.line is None else [args.line]
    if args.line is not None and args.line not in plant.line_ids:
        raise PlantError(f"--line {args.line}: the plant has no such line (its lines: {', '.join(plant.line_ids)})")
    output = Path(args.output) if args.output else (
        settings.data_dir / "exports" / f"pieces-{start:%Y%m%dT%H%M%S}-{end:%Y%m%dT%H%M%S}.{args.format}")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    url, server = database_url(settings)
    engine = make_engine(url, pool_size=1)
    window = pq.PieceFilter(from_=start, to=end)
    try:
        schemas = {}
        with engine.connect() as conn:
            for line_id in line_ids:
                schemas[line_id] = placement(conn, line_id, default=line_id == plant.default_line.id).qualified

        @contextlib.contextmanager
        def line_conn(line_id):
            with engine.begin() as conn:
                if schemas[line_id] != f'"{PUBLIC}"':
                    conn.execute(text(f"SET LOCAL search_path TO {schemas[line_id]}, public"))
                yield conn

        total = 0
        for line_id in line_ids:
            with line_conn(line_id) as conn:
                total += conn.execute(text("SELECT count(*) FROM piece WHERE created_at >= :f AND created_at < :t"),
                                      {"f": start, "t": end}).scalar()
        progress = Progress(total)
        with open(partial, "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out) if args.format == "csv" else None
            if writer is not None:
                writer.writerow(pq.CSV_COLUMNS)
            for line_id in line_ids:
                for record in pq.records(lambda line_id=line_id: line_conn(line_id), window, BATCH):
                    if writer is not None:
                        writer.writerow(pq.csv_row(line_id, record))
                    else:
                        out.write(json.dumps({"lineId": line_id, **record}, ensure_ascii=False,
                                             separators=(",", ":")) + "\n")
                    progress.advance()
        progress.close()
        os.replace(partial, output)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        engine.dispose()
        stop_if_started(server)
    print(f"{output}: {total} pieces")
    return 0

