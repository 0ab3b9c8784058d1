"""The tests' fork server (tests/forkserver.py): a forkserver that a forked command's multiprocessing starts is a
fork of the server (its imports done, `relay_forkservers`), yet its workers see what a fresh forkserver gives them:
the command's folder, environment and signal mask. Asked for, the command starts a real one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import forkserver
import pytest

pytestmark = pytest.mark.processes

# A command that starts multiprocessing's forkserver with SIGINT blocked, as core/plan.start_forkserver does (the
# resource tracker first: starting it unblocks SIGINT), and asks a worker forked from it where it runs (builtins
# only: a worker unpickles them without the command's module), and whose child the forkserver is.
PROGRAM = """
import json, multiprocessing, os, signal
from multiprocessing import forkserver, resource_tracker
resource_tracker.ensure_running()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
forkserver.ensure_running()
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
with multiprocessing.get_context("forkserver").Pool(1) as pool:
    server = pool.apply(os.getppid)
    status = open(f"/proc/{server}/status").read().splitlines()
    print(json.dumps({"cwd": pool.apply(os.getcwd), "probe": pool.apply(os.getenv, ("PROBE",)),
                      "blocked": sorted(pool.apply(signal.pthread_sigmask, (signal.SIG_BLOCK, []))),
                      "server_parent": int(next(line for line in status if line.startswith("PPid:")).split()[1]),
                      "command": os.getpid()}))
"""


def worker_facts(folder: Path, real: bool) -> dict:
    """What the program's worker saw, the program run as a forked command in `folder`."""
    env = {**os.environ, "PROBE": f"real={real}"}
    process = forkserver.Forked(forkserver.server(), "-c", [PROGRAM], folder, env, real_forkservers=real)
    stdout, stderr = process.communicate(120)
    assert process.returncode == 0, stderr
    return json.loads(stdout)


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict[bool, tuple[Path, dict]]:
    """Each kind's facts (relayed: False, real: True), each program in a folder of its own."""
    folders = {real: tmp_path_factory.mktemp(f"real{real}") for real in (False, True)}
    return {real: (folder, worker_facts(folder, real)) for real, folder in folders.items()}


@pytest.mark.parametrize("real", [False, True])
def test_the_workers_see_the_commands_folder_environment_and_signal_mask(facts, real):
    folder, seen = facts[real]
    assert seen["cwd"] == str(folder) and seen["probe"] == f"real={real}"
    assert seen["blocked"] == [2]  # SIGINT: blocked as the command had it when it started the forkserver


def test_the_relayed_forkserver_is_a_fork_of_the_server_and_a_real_one_the_commands_child(facts):
    assert facts[False][1]["server_parent"] == forkserver.server().server.pid
    assert facts[True][1]["server_parent"] == facts[True][1]["command"]
