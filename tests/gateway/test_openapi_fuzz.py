"""schemathesis against /openapi.json: generated requests (valid and invalid)
to every operation find no 5xx and no response that breaks the documented
schema. The stand-in line_controller answers the commands.

One test walks every operation with hypothesis (schemathesis' lazy
``from_fixture`` parametrisation does not run under pytest 9's subtests), so
the database and the stand-in are set up once."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.gateway.conftest import AUTH

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance,
          content_type_conformance]
EXAMPLES = 10
# An operation under /api/lines/{lineId} is its unprefixed twin's view: what is new
# there is the lineId (a line of the plant, or 404), not the body, which the twin's
# examples already fuzz. A few examples each prove the lineId.
LINE_TWIN_EXAMPLES = 3


@pytest.mark.timeout(280)
def test_no_server_error_and_responses_match_the_schema(app):
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    for operation in operations:
        examples = LINE_TWIN_EXAMPLES if operation.path.startswith("/api/lines/{lineId}/") else EXAMPLES
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            def exercise(case):
                case.call_and_validate(headers=AUTH, checks=CHECKS)

            exercise()
