"""The plant's own table: where each line's tables live (``shared.db.lines``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.models.base import Base, now_default


class PlantLine(Base):
    """One line of the plant: its schema (the one-line database's own tables stay
    in ``public``, its first line's) and the PostgreSQL role its controller takes."""

    __tablename__ = "plant_line"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    schema_name: Mapped[str] = mapped_column(String(63), nullable=False, unique=True)
    role_name: Mapped[str] = mapped_column(String(63), nullable=False, unique=True)
    created_at: Mapped[datetime] = now_default()
