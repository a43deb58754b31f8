"""The scheduler's tests' fixture and helpers: a default scheduler, the one
robot action it chooses, the actions of one kind."""

import pytest

from services.line_controller.scheduler import default_scheduler

from .builders import Step

WASH = (Step("process", "washing"),)


@pytest.fixture
def scheduler():
    return default_scheduler()


def robot_action(scheduler, state):
    chosen = [a for a in scheduler.choose(state) if a.uses_robot]
    assert len(chosen) <= 1
    return chosen[0] if chosen else None


def of_type(actions, kind):
    return [a for a in actions if isinstance(a, kind)]
