"""The declarative base every model shares: constraint names by convention
(so migrations name them the same), and the column helpers the models repeat."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Index, MetaData, String, func
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def in_list(column: str, values: tuple[str, ...]) -> str:
    """A CHECK constraint's condition: ``column`` is one of ``values``."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def now_default(**options):
    """A NOT NULL time column that defaults to the time of the insert."""
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now(), **options)


def moment():
    """A time column that may be NULL (something that has not happened yet)."""
    return mapped_column(DateTime(timezone=True))


class AuditRecord:
    """What every audit table records of an act: its row id, when, who, and the
    facts beside (``detail``, last); the table adds what was done, to what, and how
    it went. Read by time: an index on ``at``."""

    # sort_order: the table's own columns stand between these (as the migrations made them).
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True, sort_order=-1)
    at: Mapped[datetime] = now_default(sort_order=-1)
    actor: Mapped[str] = mapped_column(String(200), nullable=False, sort_order=-1)
    detail: Mapped[dict] = mapped_column(JSONB, nullable=False, server_default=sql_text("'{}'::jsonb"),
                                         sort_order=1)

    @declared_attr.directive
    def __table_args__(cls) -> tuple:
        return (Index(f"ix_{cls.__tablename__}_at", "at"),)
