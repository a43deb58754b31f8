"""gateway.tokens.TokenStore without a server: what a re-read revokes, the
check's bound, and a bad file keeping the last good tokens (served end to end
in tests/gateway/test_token_rotation.py)."""

from __future__ import annotations

import os

from gateway.tokens import TokenStore, token_key
from shared.config import parse_tokens, read_tokens_file

OP = "op-secret-000000001"
ADMIN = "admin-secret-00000001"


def store_on(path, text: str, check_seconds: float = 1.0) -> TokenStore:
    path.write_text(text)
    return TokenStore(read_tokens_file(path), path, check_seconds=check_seconds)


def replace(path, text: str) -> None:
    path.with_name("next").write_text(text)
    os.replace(path.with_name("next"), path)


def test_removed_tokens_and_changed_holders_are_revoked(tmp_path):
    path = tmp_path / "tokens"
    store = store_on(path, f"operator:alice:{OP}\nadmin:{ADMIN}\n")
    revoked = []
    store.add_listener(revoked.append)
    assert store.holder_for(OP).name == "alice"

    replace(path, f"operator:bob:{OP}\n")  # the operator token now names bob; admin's is gone
    assert store.refresh(force=True)
    assert revoked == [frozenset({token_key(OP), token_key(ADMIN)})]
    assert store.holder_for(ADMIN) is None and store.holder_for(OP).name == "bob"
    assert store.knows(token_key(OP)) and not store.knows(token_key(ADMIN))


def test_a_change_is_looked_for_at_most_once_per_interval(tmp_path):
    path = tmp_path / "tokens"
    store = store_on(path, f"operator:{OP}\n", check_seconds=3600)
    assert store.holder_for(OP)  # the first lookup checks the file
    replace(path, f"admin:{ADMIN}\n")
    assert store.holder_for(OP) and store.holder_for(ADMIN) is None  # not before the interval is up
    assert store.refresh(force=True)  # as SIGHUP does
    assert store.holder_for(OP) is None and store.holder_for(ADMIN)


def test_a_bad_or_missing_file_keeps_the_last_good_tokens_and_logs_once(tmp_path, caplog):
    path = tmp_path / "tokens"
    store = store_on(path, f"operator:{OP}\n", check_seconds=0)
    for bad in ("operator:tiny\n", "", "garbage without a colon\n"):
        replace(path, bad)
        assert not store.refresh()
        assert store.holder_for(OP)
    path.unlink()
    assert not store.refresh() and store.holder_for(OP)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 4  # one per bad version, not one per check
    assert all(OP not in r.getMessage() and "tiny" not in r.getMessage() for r in errors)


def test_tokens_from_the_environment_are_never_re_read():
    store = TokenStore(parse_tokens("TOKENS", f"operator:{OP}"))
    assert not store.refresh(force=True)
    assert store.holder_for(OP)
