"""Credential encryption and the AI settings (no database needed)."""

from __future__ import annotations

import stat

import pytest
from cryptography.fernet import Fernet

from services.ai_jobs.credentials import CredentialBox
from services.ai_jobs.schemas import schema_errors
from shared.config import SettingsError, load_settings


def test_key_file_is_created_once_private_and_reused(tmp_path):
    settings = load_settings({"LINECTL_DATA_DIR": str(tmp_path)})
    box = CredentialBox.from_settings(settings)
    sealed = box.seal("sk-abcdef123456")
    key_file = tmp_path / "ai_credential.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert b"sk-abcdef" not in sealed
    assert CredentialBox.from_settings(settings).open(sealed) == "sk-abcdef123456"
    assert box.hint("sk-abcdef123456") == "…3456"


def test_configured_key_wins_and_a_wrong_key_cannot_open(tmp_path):
    key = Fernet.generate_key().decode()
    settings = load_settings({"LINECTL_DATA_DIR": str(tmp_path), "LINECTL_AI_CREDENTIAL_KEY": key})
    sealed = CredentialBox.from_settings(settings).seal("secret-key-1")
    assert not (tmp_path / "ai_credential.key").exists()
    with pytest.raises(ValueError):
        CredentialBox(Fernet.generate_key()).open(sealed)


@pytest.mark.parametrize("env,name", [
    ({"LINECTL_AI_CREDENTIAL_KEY": "not-a-key"}, "LINECTL_AI_CREDENTIAL_KEY"),
    ({"LINECTL_AI_RETRY_BACKOFF_SECONDS": "soon"}, "LINECTL_AI_RETRY_BACKOFF_SECONDS"),
])
def test_bad_ai_settings_name_the_variable(env, name):
    with pytest.raises(SettingsError, match=name):
        load_settings(env)


def test_quiz_answer_index_must_point_into_options():
    ok = [{"question": "q", "options": ["a", "b"], "answerIndex": 1}]
    assert schema_errors("quiz_generation", "1", ok) == []
    assert schema_errors("quiz_generation", "1", [{**ok[0], "answerIndex": 2}])
