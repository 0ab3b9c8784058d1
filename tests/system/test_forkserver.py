"""The tests' fork server (tests/forkserver.py): a forkserver that a forked command's multiprocessing starts is a
fork of the server (its imports done, `relay_forkservers`), yet its workers see what a fresh forkserver gives them:
the command's folder, environment and signal mask. Asked for, the command starts a real one. Likewise a SLURM task
that a forked command's submitit starts (`relay_slurm_tasks`): its module runs in a fork of the server, with the
task's arguments, folder and environment, ends with the status a real one would, and dies with its relay."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
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
    assert facts[False][1]["server_parent"] == forkserver.server().pid
    assert facts[True][1]["server_parent"] == facts[True][1]["command"]


# A SLURM task's module (run as `python -u -m probe MODE` in its folder): what it sees, then its end by MODE.
PROBE = """
import json, os, sys, time
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.getenv("PROBE"), "parent": os.getppid(),
                  "imported_before": "torch" in sys.modules}), flush=True)
if sys.argv[1] == "exit":
    sys.exit(3)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), 9)
print(os.getpid(), flush=True)
time.sleep(600)
"""

# A command that starts the probe as submitit starts a task (its executor's `python`; submitit only checks that an
# `srun` is on PATH), three times: ending with status 3, killing itself, and killed (SIGKILL) from outside.
TASKS = """
import json, os, shlex, subprocess, sys, time
from submitit.slurm import slurm
task = [*shlex.split(slurm.SlurmExecutor(os.getcwd()).python), "-u", "-m", "probe"]
exited = subprocess.run([*task, "exit"], capture_output=True, text=True)
killed = subprocess.run([*task, "kill"], capture_output=True, text=True)
sleeper = subprocess.Popen([*task, "sleep"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
sleeper.stdout.readline()
pid = int(sleeper.stdout.readline())
sleeper.kill()
sleeper.wait()
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.05)
print(json.dumps({"exited": [exited.returncode, json.loads(exited.stdout.splitlines()[0])],
                  "killed": killed.returncode, "sleeper": sleeper.returncode,
                  "sleeper_gone": time.monotonic() < deadline, "command": os.getpid()}))
"""


@pytest.fixture(scope="module")
def task_facts(tmp_path_factory) -> dict[bool, tuple[Path, dict]]:
    """What the probe saw and how it ended, for relayed tasks (False) and real ones (True), each in its folder."""
    seen = {}
    for real in (False, True):
        folder = tmp_path_factory.mktemp(f"tasks_real{real}")
        (folder / "probe.py").write_text(PROBE)
        srun = folder / "bin" / "srun"
        srun.parent.mkdir()
        srun.write_text("#!/bin/sh\nexit 1\n")
        srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
        env = {**os.environ, "PROBE": f"real={real}", "PATH": f"{srun.parent}{os.pathsep}{os.environ['PATH']}"}
        process = forkserver.Forked(forkserver.server(), "-c", [TASKS], folder, env, real_slurm_tasks=real)
        stdout, stderr = process.communicate(180)
        assert process.returncode == 0, stderr
        seen[real] = folder, json.loads(stdout)
    return seen


@pytest.mark.parametrize("real", [False, True])
def test_a_slurm_tasks_module_sees_its_arguments_folder_and_environment_and_ends_as_it_ends(task_facts, real):
    folder, seen = task_facts[real]
    returncode, probe = seen["exited"]
    assert returncode == 3 and probe["argv"] == ["exit"]
    assert probe["cwd"] == str(folder) and probe["probe"] == f"real={real}"
    assert seen["killed"] == -9  # the module's own SIGKILL is the task's end
    assert seen["sleeper"] == -9 and seen["sleeper_gone"]  # a killed relay takes the forked module with it


def test_a_relayed_task_is_a_fork_of_the_server_and_a_real_one_a_fresh_interpreter(task_facts):
    relayed, real = task_facts[False][1]["exited"][1], task_facts[True][1]["exited"][1]
    assert relayed["parent"] == forkserver.server().pid and relayed["imported_before"]
    assert real["parent"] == task_facts[True][1]["command"] and not real["imported_before"]


def test_the_processes_of_a_run_share_its_server_and_another_run_gets_its_own_address():
    """A second process of the run (a test worker, a test's own script: the run's environment) joins this process's
    server instead of starting one (5-8 s of imports each); a process of another run has another address."""
    importing = f"import sys; sys.path.insert(0, {str(Path(forkserver.__file__).parent)!r}); import forkserver; "
    joined = subprocess.run([sys.executable, "-S", "-c", importing + "print(forkserver.server().pid)"],
                            capture_output=True, text=True, timeout=60)
    assert joined.returncode == 0, joined.stderr
    assert int(joined.stdout) == forkserver.server().pid
    other = {key: value for key, value in os.environ.items() if key != "PYTEST_XDIST_TESTRUNUID"}
    other["UNLEARNBENCH_FORKSERVER_RUN"] = "another run"
    printed = subprocess.run([sys.executable, "-S", "-c", importing + "print(repr(forkserver.run_address()))"],
                             capture_output=True, text=True, timeout=60, env=other).stdout
    assert printed.strip() not in ("", repr(forkserver.run_address()))
