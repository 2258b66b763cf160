import os
from pathlib import Path
import subprocess
import sys

import pytest

from twophase import failpoints


@pytest.fixture(autouse=True)
def _clean():
    failpoints.disable()
    yield
    failpoints.disable()


def test_parse_spec():
    parsed = failpoints.parse("after_pre_commit:exit, mid_commit:raise@3;before_commit:sleep(25)")
    assert parsed["after_pre_commit"].kind == "exit"
    assert parsed["mid_commit"].hit == 3
    assert parsed["before_commit"].sleep_ms == 25


@pytest.mark.parametrize("spec, fragment", [
    ("nowhere:exit", "unknown failpoint"),
    ("after_commit:explode", "ACTION one of"),
    ("after_commit", "NAME:ACTION"),
    ("after_commit:raise@0", "@HIT"),
])
def test_bad_spec_names_the_problem(spec, fragment):
    with pytest.raises(ValueError, match=fragment):
        failpoints.parse(spec)


def test_disabled_points_do_nothing():
    for name in failpoints.ALL:
        failpoints.hit(name)


def test_raise_on_nth_hit_only():
    failpoints.enable("mid_commit", "raise@2")
    failpoints.hit("mid_commit")
    with pytest.raises(failpoints.FailpointCrash):
        failpoints.hit("mid_commit")
    failpoints.hit("mid_commit")


def test_exit_action_kills_the_process_from_env():
    env = dict(os.environ, KAFKA_EOS_FAILPOINTS="after_commit:exit")
    code = "from twophase import failpoints; failpoints.hit('after_commit'); print('survived')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    assert result.returncode == failpoints.EXIT_CODE
    assert "survived" not in result.stdout


def test_exit_can_kill_the_whole_process_group():
    # The child runs in a process group of its own (as Spark's workers do), yet the named group dies.
    code = ("import subprocess, sys, os; "
            "env = dict(os.environ, KAFKA_EOS_FAILPOINTS='mid_commit:exit', KAFKA_EOS_FAILPOINT_KILL_GROUP=str(os.getpgid(0))); "
            "subprocess.run([sys.executable, '-c', \"from twophase import failpoints; failpoints.hit('mid_commit')\"], env=env, "
            "preexec_fn=os.setpgrp); "
            "print('parent survived')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, start_new_session=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    assert result.returncode == -9
    assert "parent survived" not in result.stdout
