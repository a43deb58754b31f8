"""After a hardware action's result the scheduling round runs in that result's
own transaction (issue 55: one commit and one flush for both, not two): what the
round starts commits with the result; a round whose condition fails is rolled
back to its savepoint, and the result still commits without it."""

from tests.line_controller.scripted import Refill


def test_the_round_after_a_result_commits_in_its_transaction(harness):
    _, jobs = harness.started_order()
    first = harness.act(Refill(jobs[0], 1))
    harness.scheduler.queued.append(Refill(jobs[1], 2))
    before, transactions = len(harness.hardware.requests), harness.loop.uow.last_tx
    assert harness.succeed(first).status == "HANDLED"
    assert len(harness.hardware.requests) == before + 1  # the round's refill was sent
    assert harness.loop.uow.last_tx == transactions + 1  # one transaction for both
    task = harness.row("SELECT * FROM task WHERE id = :t", t=harness.hardware.requests[-1].task_id)
    assert (task.job_id, task.status) == (jobs[1], "RUNNING")
    assert harness.row("SELECT max(tx_id) AS last FROM event_log").last == transactions + 1


def test_a_dropped_round_leaves_its_result_committed(harness):
    _, jobs = harness.started_order()
    first = harness.act(Refill(jobs[0], 1))
    harness.scheduler.queued.append(Refill(999_999, 2))  # no such job: its condition fails
    before = len(harness.hardware.requests)
    assert harness.succeed(first).status == "HANDLED"
    assert harness.job(jobs[0]).temp_slot_no == 1  # the result is on record
    assert len(harness.hardware.requests) == before
    assert harness.row("SELECT count(*) AS n FROM task").n == 1
