"""People fixtures: cheap argon2 parameters (the work is the same for every
path, which is what the tests compare) and stores on the test database."""

from __future__ import annotations

import pytest

from services.identity.passwords import Passwords
from services.identity.sessions import SessionStore
from services.identity.signin import SignIn
from services.identity.users import Actor, UserStore
from shared.config import load_settings

FAST_ARGON2 = {"LINECTL_ARGON2_TIME_COST": "1", "LINECTL_ARGON2_MEMORY_KIB": "1024"}
PASSWORD = "correct horse battery"
CONSOLE = Actor("test", "admin", "console")


@pytest.fixture
def people_settings(db_url, tmp_path):
    return load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_DATA_DIR": str(tmp_path), **FAST_ARGON2})


@pytest.fixture
def users(engine, people_settings):
    return UserStore(engine, Passwords.from_settings(people_settings))


@pytest.fixture
def sign_in(engine, people_settings, users):
    return SignIn(engine, users.passwords, SessionStore.from_settings(engine, people_settings))
