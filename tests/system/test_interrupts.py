"""Ctrl-C and SIGTERM stop a sweep at the next safe point (unlearnbench/runtime/interrupt.py): one line, exit 130,
every finished job kept, and a rerun resumes; wherever the signal lands, Hydra's composition included; within a
step of a long training stage; and however the test suite itself was started (a parent that ignores SIGINT).

The sweeps run in processes forked from the test's fork server (forkserver.py): real processes with their own
signal handlers, started in milliseconds, so that many moments can be tried.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest
from helpers import QUICK_REPORT, REPO, TINY, results, with_defaults

INTERRUPTED = "unlearnbench: interrupted; finished jobs are kept"


def start(args: list[str], root: Path, sweep: str = "sweep", cache: Path | None = None, env: dict | None = None,
          **options) -> forkserver.Forked:
    """The sweep in a forked process whose SIGINT is Python's default (as in a terminal), whatever this one's is;
    its models in `root`'s own cache unless another is given; `env` adds to this process's environment."""
    args = with_defaults([*args, f"hydra.sweep.dir={root / sweep}", f"paths.cache_dir={cache or root / 'cache'}",
                          f"paths.data_dir={root / 'data'}"], QUICK_REPORT)
    options.setdefault("sigint_default", True)
    environment = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return forkserver.Forked(forkserver.server(), "unlearnbench", args, root, environment, **options)


def handling(pid: int) -> bool:
    """Whether the process has installed its own SIGTERM handler (the console script does so first of all)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def wait_for(condition, timeout: float = 120, every: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def assert_stopped_in_one_line(returncode: int, stdout: str, stderr: str) -> None:
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith(INTERRUPTED)
    assert (stdout + stderr).count(INTERRUPTED) == 1


def assert_kept_whole(sweep: Path) -> None:
    """Every result.json there is complete, and nothing is half-written (no temporary files)."""
    assert all(result["status"] == "complete" for result in results(sweep).values())
    assert not [p for p in sweep.glob("**/*") if ".tmp" in p.name or p.name.startswith(".tmp")]


@pytest.mark.processes
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_between_jobs_is_one_line_keeps_finished_jobs_and_a_rerun_resumes(tmp_path, calibrated, signum):
    """The first job's models are in the sweep's cache (it finishes at once), the second job's are not (it trains
    them: the signal lands while it is composed or trained); they are for the rerun, which only resumes."""
    args = SWEEP
    copy_models(calibrated, 0, tmp_path / "cache")
    process = start(args, tmp_path)
    wait_for(lambda: results(tmp_path / "sweep") or process.poll() is not None, every=0.05)
    process.send_signal(signum)  # the first job has finished: the second is being composed or trained
    assert_stopped_in_one_line(process.wait(120), *process.communicate(120))
    finished = results(tmp_path / "sweep")
    assert len(finished) == 1
    assert_kept_whole(tmp_path / "sweep")
    copy_models(calibrated, 1, tmp_path / "cache")
    resumed = start(args, tmp_path)
    stdout, stderr = resumed.communicate(300)
    assert resumed.returncode == 0, stderr[-3000:]
    assert (stdout + stderr).count("already complete, skipped") == 1 and len(results(tmp_path / "sweep")) == 2


@pytest.mark.processes
def test_ctrl_c_inside_a_long_training_stage_stops_within_a_step(tmp_path):
    """300 epochs of M_o: the interrupt lands in epoch 2 and the job stops at its next batch, so at most the epoch
    under way reports; no model reaches the cache."""
    process = start(["+method=retrain", *TINY, "train.epochs=300", "train.milestones=[299]"], tmp_path)
    for line in process.stdout:
        if "original model (training seed 0): epoch 2/300" in line:
            break
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(120)
    assert_stopped_in_one_line(process.returncode, stdout, stderr)
    assert sum(": epoch " in line for line in stdout.splitlines()) <= 1
    assert not list((tmp_path / "cache").glob("*/COMPLETE"))
    assert not list((tmp_path / "sweep").glob("*/result.json"))


MOMENTS = 20


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, shared_cache):
    """A two-job sweep run to its end once to cache its models (in the suite's cache), then again, from the cache
    as every trial runs it, to measure how long it takes."""
    root = tmp_path_factory.mktemp("moments")
    for sweep in ("cached", "calibration"):
        began = time.monotonic()
        process = start(SWEEP, root, sweep, shared_cache)
        _, stderr = process.communicate(600)
        assert process.returncode == 0, stderr[-3000:]
    return root, shared_cache, time.monotonic() - began


SWEEP = ["+method=retrain", "seeds.train=0,1", *TINY]


def copy_models(calibrated, seed: int, cache: Path) -> None:
    """The models (M_o, M_r) of SWEEP's job of training seed `seed`, copied from the calibrated sweep's cache into
    `cache` where it lacks them."""
    root, shared, _ = calibrated
    (job,) = [r for r in results(root / "cached").values() if r["job"]["seed_train"] == seed]
    for key in [job["cache"]["original"]["key"], *(entry["key"] for entry in job["cache"]["retrained"])]:
        if not (cache / key).exists():
            shutil.copytree(shared / key, cache / key)


@pytest.mark.processes
@pytest.mark.parametrize("trial", range(MOMENTS))
def test_an_interrupt_at_a_random_moment_exits_130_in_one_line(calibrated, trial):
    """SIGINT or SIGTERM at a moment drawn uniformly over the first half of the sweep (from the moment its handler
    is in place): composing the config, Hydra's set-up, a job's stages, the count, between jobs. Its models come
    from the cache, so most of the time goes to composition and evaluation, where a raising handler did harm.

    The calibration's duration is only a guide: on a loaded machine a trial can run twice as fast as it did. The
    sweep is frozen (SIGSTOP) at the moment and the signal sent while it stands still; where it had already printed
    its report's last line (so had no safe point left but the exit status), it runs on and the trial is drawn again
    at half the moment, so that every trial is an interrupt the sweep must honour."""
    root, cache, duration = calibrated
    moment = random.Random(trial).uniform(0, duration / 2)
    for attempt in range(5):
        folder = root / f"trial{trial}.{attempt}"
        if frozen := frozen_at(moment, folder, cache):
            break
        moment /= 2
    else:
        pytest.fail(f"the sweep was over before every moment tried, down to {moment:.3f} s")
    process, printed = frozen
    process.send_signal(signal.SIGTERM if trial % 2 else signal.SIGINT)
    process.send_signal(signal.SIGCONT)
    stdout, stderr = process.communicate(120)
    assert_stopped_in_one_line(process.returncode, printed + stdout, stderr)
    assert_kept_whole(folder)


def frozen_at(moment: float, folder: Path, cache: Path) -> tuple[forkserver.Forked, str] | None:
    """The sweep into `folder`, stopped (SIGSTOP) `moment` seconds after its handler is in place, and what it had
    printed by then; None (the sweep run to its end) where it had already printed its report's last line."""
    process = start(SWEEP, folder.parent, folder.name, cache, env={"PYTHONUNBUFFERED": "1"})
    wait_for(lambda: handling(process.pid) or process.poll() is not None)
    time.sleep(moment)
    process.send_signal(signal.SIGSTOP)
    printed = written_so_far(process)
    if process.poll() is None and f"report: {folder / 'report'}" not in printed:
        return process, printed
    process.send_signal(signal.SIGCONT)
    process.communicate(120)
    return None


def written_so_far(process: forkserver.Forked) -> str:
    """What the (stopped) process has written to its stdout up to now, taken out of the pipe: `communicate` then
    returns the rest."""
    descriptor = process.stdout.fileno()
    os.set_blocking(descriptor, False)
    chunks = []
    try:
        while chunk := os.read(descriptor, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(descriptor, True)
    return b"".join(chunks).decode("utf-8", errors="replace")


# Batches that start the local launcher's workers: the sweep, and the line after which the workers start (loky's pool
# over a forkserver that imports torch and the job loop for seconds, then forks the workers). The held-out batch is a
# tuning's last: its one trial job runs in the sweep's own process, as a one-job batch does.
STARTING = {
    "local": ["+method=retrain", "seeds.train=0,1", *TINY, "hydra/launcher=local", "hydra.launcher.workers=2"],
    "held-out": ["experiment=tune", "+method=finetune", "tune.trials=1", "tune.seeds=[0]", "tune.heldout=[1,2]", *TINY,
                 "hydra.launcher.workers=2"],
}
BATCH = re.compile(rb"local: ([2-9]|\d\d+) job\(s\)")  # a batch of several jobs: workers to start
WORKER = b"] job "  # a worker's first line: the batch has started
START_S = 3.0  # the moments are drawn within this long after the batch's line (the forkserver's imports take longer
# on 2 cores), and the signal is sent at the latest when a worker prints


@pytest.mark.processes
@pytest.mark.parametrize(("batch", "trial"), [("local", 0), ("local", 1), ("held-out", 2), ("held-out", 3)])
def test_ctrl_c_while_a_batch_of_workers_starts_is_one_line_from_every_process(tmp_path, shared_cache, batch, trial):
    """Ctrl-C as a terminal sends it, to the sweep's whole process group, at a moment drawn while the batch starts:
    while the forkserver imports, while it forks the workers, while the calls are handed to them. Every process
    stays silent (the forkserver and its children were started with SIGINT blocked, and the sweep stops them once
    they are up: runtime/interrupt.py), the sweep prints one line and exits 130, keeps its finished jobs (the
    held-out batch's trial) and leaves no process behind."""
    process = start(STARTING[batch], tmp_path, cache=shared_cache, env={"PYTHONUNBUFFERED": "1"}, new_session=True,
                    real_forkservers=True)  # a forkserver that imports for seconds, as outside the tests
    printed = read_until(process, b"", BATCH.search, 300)
    batch_line = BATCH.search(printed)
    assert batch_line, printed.decode()[-3000:]
    moment = random.Random(trial).uniform(0, START_S)
    printed = read_until(process, printed, lambda text: WORKER in text[batch_line.end():], moment)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(120)
    assert_stopped_in_one_line(process.returncode, printed.decode() + stdout, stderr)
    assert_kept_whole(tmp_path / "sweep")
    assert len(results(tmp_path / "sweep")) == (1 if batch == "held-out" else 0)
    wait_for(lambda: not group_alive(process.pid), timeout=30, every=0.1)


def read_until(process: forkserver.Forked, printed: bytes, condition, timeout: float) -> bytes:
    """`printed` and what the process writes to its stdout after it, until `condition` holds for all of it, or
    `timeout` seconds pass, or the stream ends (read from the pipe itself: `communicate` then returns the rest)."""
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    while not condition(printed) and (left := deadline - time.monotonic()) > 0:
        if select.select([descriptor], [], [], left)[0]:
            if not (chunk := os.read(descriptor, 65536)):
                break
            printed += chunk
    return printed


def group_alive(group: int) -> bool:
    """Whether any process of the process group `group` is still running (zombies excluded)."""
    listing = subprocess.run(["ps", "-o", "stat=", "-g", str(group)], capture_output=True, text=True).stdout
    return any(not state.startswith("Z") for state in listing.split())


PARENT = """
import json, os, signal, sys, time
sys.path[:0] = [{here!r}, {tests!r}]  # this module and the helpers it imports
from test_interrupts import start, results, assert_stopped_in_one_line, wait_for
from pathlib import Path

root = Path({root!r})
args = ["+method=retrain", "seeds.train=0,1", *{tiny!r}]
outcome = {{}}
for name, options, signum in (("default", {{}}, signal.SIGINT), ("inherited", {{"sigint_default": False}}, None)):
    process = start(args, root, name, **options)
    wait_for(lambda: results(root / name) or process.poll() is not None, every=0.05)
    if signum is None:  # SIGINT ignored from the start stays ignored: the sweep goes on; SIGTERM still stops it
        process.send_signal(signal.SIGINT)
        time.sleep(1)
        outcome["ignored_sigint_running"] = process.poll() is None
        signum = signal.SIGTERM
    process.send_signal(signum)
    stdout, stderr = process.communicate(120)
    assert_stopped_in_one_line(process.returncode, stdout, stderr)
    outcome[name] = process.returncode
print(json.dumps(outcome))
"""


@pytest.mark.processes
def test_the_interrupt_cases_pass_from_a_parent_that_ignores_sigint(tmp_path, calibrated):
    """As when the suite runs as `make test &`: a background job of a non-interactive shell ignores SIGINT, and its
    children inherit that. The interrupt tests give the sweep Python's default SIGINT all the same; the console
    script itself keeps an ignored SIGINT ignored, and stops on SIGTERM. (The first job's models are cached, as in
    the test above.)"""
    copy_models(calibrated, 0, tmp_path / "cache")
    script = PARENT.format(here=str(Path(__file__).parent), tests=str(REPO / "tests"), root=str(tmp_path),
                           tiny=TINY)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "default": 130, "ignored_sigint_running": True, "inherited": 130}


def test_an_interrupt_that_lands_in_a_finalizer_is_raised_again_outside_it(monkeypatch):
    """A raising handler can land in a weakref callback or `__del__` that the garbage collector runs, where Python
    prints the exception ("Exception ignored in …") and drops it: the interrupt is then raised again, right after."""
    from unlearnbench.runtime import interrupt

    handlers = {signum: signal.getsignal(signum) for signum in interrupt.SIGNALS}
    monkeypatch.setattr(interrupt, "requested", None)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even under `make test &`
    interrupt.install()

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs inside __del__, in an `immediately` region

    printed = []
    monkeypatch.setattr(interrupt, "_previous_hook", printed.append)
    try:
        with pytest.raises(interrupt.Interrupted), interrupt.immediately():
            Finalized()  # finalized at once: the Interrupted raised inside __del__ is lost there
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # ...and raised again here, outside it
                time.sleep(0.001)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert printed == [] and interrupt.requested == signal.SIGINT


def sigint_bit(pid: int, field: str) -> bool:
    """Whether SIGINT is in the process's signal set `field` of /proc (SigBlk: blocked, SigIgn: ignored)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith(f"{field}:"))
    return bool(mask & (1 << (signal.SIGINT - 1)))


@pytest.mark.processes
def test_a_process_started_with_sigint_blocked_inherits_the_block_and_a_ctrl_c_meanwhile_is_not_lost(monkeypatch):
    """`sigint_blocked`: the process started inside it begins with SIGINT blocked (how the local launcher's forkserver
    and workers start: a Ctrl-C waits in them); this thread's own Ctrl-C that came meanwhile is handled as the region
    ends, and the thread's mask is as before."""
    from unlearnbench.runtime import interrupt

    handlers = {signum: signal.getsignal(signum) for signum in interrupt.SIGNALS}
    monkeypatch.setattr(interrupt, "requested", None)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt.install()
    child = None
    try:
        with interrupt.sigint_blocked():
            child = subprocess.Popen(["sleep", "60"])
            signal.raise_signal(signal.SIGINT)  # to this thread, which blocks it: it waits
            waited = interrupt.requested
        handled = interrupt.requested
        assert waited is None and handled == signal.SIGINT
        assert sigint_bit(child.pid, "SigBlk") and not sigint_bit(os.getpid(), "SigBlk")
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def test_a_process_left_to_its_parent_discards_a_ctrl_c_that_waited_and_ignores_the_next():
    """`leave_to_parent` (a launcher's worker, started with SIGINT blocked): a Ctrl-C that waited in it is discarded,
    not raised, SIGINT is unblocked and ignored from then on."""
    from unlearnbench.runtime import interrupt

    handler = signal.getsignal(signal.SIGINT)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.raise_signal(signal.SIGINT)  # waits: blocked
        assert signal.SIGINT in signal.sigpending()
        interrupt.leave_to_parent()
        signal.raise_signal(signal.SIGINT)  # ignored
        assert signal.SIGINT not in signal.sigpending() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert not sigint_bit(os.getpid(), "SigBlk") and sigint_bit(os.getpid(), "SigIgn")
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

TEXT = ["experiment=tofu", "train.epochs=20", "runtime.print_table=false", "+method=grad_ascent"]  # the lines below
# Where Ctrl-C lands in a text job: the progress line after which it is sent, the job's further overrides, and the
# models the cache holds when it starts (copied from the first case's: so the cache afterwards holds those alone,
# never the interrupted one).
TEXT_STAGES = {
    "retrained": ("retrained model (unlearning seed 0): epoch 2/20", [], ("original",)),
    "method": ("target forget10: grad_ascent: started", ["method.epochs=2000"], ("original", "retrained")),
    "evaluation": ("target forget10: evaluation of M_r and M_o: started", [], ("original", "retrained")),
}


def interrupted_after(line: str, args: list[str], root: Path, pause: float = 0.0) -> tuple[float, str, str, int]:
    """The text job started in `root`, sent SIGINT `pause` seconds after it printed `line`: the seconds it took to
    stop, its output and its exit status."""
    process = start(args, root)
    for printed in process.stdout:
        if line in printed:
            break
    time.sleep(pause)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(120)
    return time.monotonic() - sent, stdout, stderr, process.returncode


@pytest.fixture(scope="module")
def text_original(tmp_path_factory, shared_cache):
    """Ctrl-C within M_o's fine-tuning, what the cache and the sweep held then, and the same command run again to its
    end in the same folder, with the suite's cache (experiment=tofu's models, which other files need too): its
    models (M_o and M_r) and result.json serve the other stages."""
    root = tmp_path_factory.mktemp("text")
    stopped = interrupted_after("original model (training seed 0): epoch 2/20", TEXT, root)
    left = (len(list((root / "cache").glob("*/COMPLETE"))), list((root / "sweep").glob("*/result.json")))
    rerun = start(TEXT, root, cache=shared_cache)
    _, stderr = rerun.communicate(600)
    return root, stopped, left, rerun.returncode, stderr, shared_cache


@pytest.mark.processes
def test_ctrl_c_inside_a_text_models_fine_tuning_stops_within_seconds_and_a_rerun_completes(text_original):
    """M_o's fine-tuning stops at its next batch, exits 130 in one line within 5 s, publishes no model and writes no
    result.json; the same command then completes in the same folder."""
    root, (seconds, stdout, stderr, returncode), (cached, written), rerun_returncode, rerun_stderr, _ = text_original
    assert seconds < 5
    assert_stopped_in_one_line(returncode, stdout, stderr)
    assert cached == 0 and not written
    assert rerun_returncode == 0, rerun_stderr[-3000:]
    assert [r["status"] for r in results(root / "sweep").values()] == ["complete"]


@pytest.mark.processes
@pytest.mark.parametrize("stage", TEXT_STAGES)
def test_ctrl_c_inside_a_text_stage_stops_within_seconds_and_caches_nothing_it_interrupted(text_original, tmp_path,
                                                                                           stage):
    """M_r's fine-tuning, a method's steps, the evaluation: each stops at its next batch (or generated token), exits
    130 in one line within 5 s, publishes no model it was training and writes no result.json. The models finished
    before the stage are copied from the cache of the first case's rerun."""
    line, extra, models = TEXT_STAGES[stage]
    (done,) = results(text_original[0] / "sweep").values()
    keys = {"original": [done["cache"]["original"]["key"]], "retrained": [e["key"] for e in done["cache"]["retrained"]]}
    copied = [key for model in models for key in keys[model]]
    for key in copied:
        shutil.copytree(text_original[-1] / key, tmp_path / "cache" / key)
    seconds, stdout, stderr, returncode = interrupted_after(line, [*TEXT, *extra], tmp_path,
                                                            pause=0.5 if stage == "method" else 0.0)  # past set-up
    assert seconds < 5
    assert_stopped_in_one_line(returncode, stdout, stderr)
    assert sorted(p.parent.name for p in (tmp_path / "cache").glob("*/COMPLETE")) == sorted(copied)
    assert not list((tmp_path / "sweep").glob("*/result.json"))
