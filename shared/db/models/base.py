"""The declarative base every model shares: constraint names by convention
(so migrations name them the same), and the column helpers the models repeat."""

from __future__ import annotations

from sqlalchemy import DateTime, MetaData, func
from sqlalchemy.orm import DeclarativeBase, mapped_column

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


def now_default():
    """A NOT NULL time column that defaults to the time of the insert."""
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


def moment():
    """A time column that may be NULL (something that has not happened yet)."""
    return mapped_column(DateTime(timezone=True))
