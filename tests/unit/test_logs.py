import json
import logging

from shared.logs import configure_logging


def test_json_format_is_one_object_per_line(capsys):
    configure_logging("INFO", "json", "line_controller")
    logging.getLogger("t").info("hello %s", "there", extra={"jobId": 7})
    err = capsys.readouterr().err.strip().splitlines()
    entry = json.loads(err[-1])
    assert entry["message"] == "hello there"
    assert entry["process"] == "line_controller"
    assert entry["jobId"] == 7
    configure_logging("WARNING", "text")
