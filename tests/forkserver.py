"""Console-script processes without the import cost: a server that imports torch, Lightning, Hydra and unlearnbench
once, then forks a fresh process for every command a test runs.

Why: a console-script process spends 5–8 s importing before it does anything (torch 2.2 s, Lightning's import of
torch._dynamo 1.8 s, Hydra, the project), and a tiny digits job needs 2–3 s: most of the suite's time was imports.
A fork of a process that has imported those modules, and run nothing, starts in milliseconds.

What a forked command is: a real process with its own pid, signal dispositions, standard streams, working folder and
environment, exiting with the status the console script would (a `SystemExit` message on stderr and status 1, an
uncaught exception's traceback and status 1). Its `sys.path` is the console script's: the script's folder, then
PYTHONPATH, then the interpreter's; PYTHONWARNINGS and PYTHONUNBUFFERED are applied as at start-up. What the server
imported stays imported (the parent's state at fork: nothing of a job's state, which begins in `main()`).

Safe to fork: the server imports modules and runs nothing. The only threads they start are OpenBLAS's pools (NumPy,
SciPy) and pyarrow's jemalloc background thread, and both libraries handle fork (their atfork handlers quiesce the
pools; jemalloc's child runs without background threads). Where the installed script itself is the subject, the tests
start it as a shell would: the extending example, a local sweep stopped by signals, run_sweep stopped by
Ctrl-C; there every process is a real interpreter. A forked `python -m unlearnbench` has
that main module's spec, as the interpreter gives it, so that multiprocessing's spawned processes do not run the
command again.

The forkserver that a forked command's multiprocessing starts (the local launcher's workers and ddp_spawn's ranks
are forked from it) would import torch, Lightning and the job loop again, 6-8 s each time: in a forked command it
is a fork of this server too (`relay_forkservers`), behind a small stand-in process that is the command's child.
The tests of how a forkserver starts (a Ctrl-C during its imports) ask for real ones. So is a SLURM task that a
forked command's submitit starts (`relay_slurm_tasks`): SLURM starts, signals and kills the stand-in, and the
stand-in's death ends the fork; one SLURM test asks for real tasks.

One server per test run (`run_address`): the first process to need it starts it, and the run's other processes
(pytest-xdist's workers, a test's own script) join it, so its imports are paid once; it ends with the last session.
It is no test process's child (it leaves the one that started it), so no test process's tree holds the commands
other processes asked for.

Protocol (SOCK_SEQPACKET, on an address in the abstract namespace): a client process opens a session (one
connection, held while it lives). For each process it asks for, it connects again and sends one JSON request with
its stdin, stdout and stderr as file descriptors; the server answers {"pid": N} on that connection, and
{"exit": N, "returncode": R} when the process ends. A relay does the same, with the forkserver's descriptors too.
A process whose connection closes first (its relay killed, its test process gone) is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

PRELOAD = (
    "torch", "lightning_fabric", "hydra", "omegaconf", "matplotlib.figure", "matplotlib.backends.backend_agg",
    "hydra._internal.hydra", "hydra._internal.core_plugins.basic_launcher",
    "hydra._internal.core_plugins.basic_sweeper", "hydra_plugins.unlearnbench_launcher.local",
    "unlearnbench.cli", "unlearnbench.core.job", "unlearnbench.tasks.image.bench", "unlearnbench.tasks.ranking.bench",
    "unlearnbench.tasks.image.methods.finetune", "unlearnbench.tasks.image.models.resnet",
    "unlearnbench.tasks.image.data.digits", "sklearn.datasets", "unlearnbench.report.build",
    "unlearnbench.report.callback", "pyarrow.parquet", "unlearnbench.report.render.figures", "scikit_posthocs",
    # the text task's model and metrics (transformers' Llama 1.2 s, ROUGE 0.15 s in every text job otherwise)
    "unlearnbench.tasks.text.bench", "transformers.models.llama.modeling_llama", "rouge_score.rouge_scorer",
    "submitit.slurm.slurm",  # what a SLURM task runs (`relay_slurm_tasks`)
)
ENTRY_POINTS = {"unlearnbench": "main", "unlearnbench-report": "report_main"}  # console script → unlearnbench.cli
MESSAGE = 65536


# --- the server -------------------------------------------------------------------------------------------------

def serve(listener: socket.socket) -> dict | None:
    """Answer connections until the last session ends (None), or return a request in the forked child. A connection
    is a client's session (a test process, for as long as it uses the server: its first message asks for one) or
    one process's: a command a test runs, or a relay's (`relay`). A process's connection gets its pid, then its exit
    status; one that closes while its process runs (a relay killed, a test process gone) takes the process with it,
    as the death of the process it stands for would."""
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    for source in (listener, wakeup_read):
        selector.register(source, selectors.EVENT_READ)
    sessions: set[socket.socket] = set()
    owners: dict[int, socket.socket] = {}  # a forked process's pid → its open connection
    while True:
        for key, _ in selector.select():
            source = key.fileobj
            if source is listener:
                connection = accepted(listener)
                if connection is not None:
                    selector.register(connection, selectors.EVENT_READ)
                continue
            if source is wakeup_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wakeup_read, 4096)
                reap(owners, selector)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(source, MESSAGE, 16)
            except OSError:
                data, fds = b"", []
            if not data:
                selector.unregister(source)
                source.close()
                if source in sessions:
                    sessions.discard(source)
                    if not sessions:
                        end(owners)
                        listener.close()  # at once: a client that connects now is refused, and starts a server
                        return None
                    continue
                for pid in [pid for pid, owner in owners.items() if owner is source]:
                    del owners[pid]  # its exit, when reaped, goes nowhere
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                continue
            request = json.loads(data)
            if request.get("session"):
                sessions.add(source)
                source.send(json.dumps({"pid": os.getpid()}).encode())
                continue
            pid = os.fork()
            if pid == 0:
                for registered in list(selector.get_map().values()):
                    if isinstance(registered.fileobj, socket.socket):
                        registered.fileobj.close()
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wakeup_read, wakeup_write):
                    os.close(fd)
                become(request, fds)
                return request
            for fd in fds:
                os.close(fd)
            source.send(json.dumps({"pid": pid}).encode())
            owners[pid] = source


def accepted(listener: socket.socket) -> socket.socket | None:
    """The next connection, if its process runs as this user (the address is in the abstract namespace, which any
    local process can reach)."""
    connection, _ = listener.accept()
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    if struct.unpack("3i", credentials)[1] == os.geteuid():
        return connection
    connection.close()
    return None


def reap(owners: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Report each ended child on its connection (unless that is gone)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        owner = owners.pop(pid, None)
        if owner is not None:
            selector.unregister(owner)
            with contextlib.suppress(OSError):
                owner.send(json.dumps({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())
            owner.close()


def end(owners: dict[int, socket.socket]) -> None:
    """The last session is over: what still runs (left by a test) goes with the server."""
    for pid in owners:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


BASE_PATH: list[str] = []  # the interpreter's own sys.path entries (no script folder, no PYTHONPATH)


def become(request: dict, fds: list[int]) -> None:
    """Turn this forked child into the process the request describes (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler)
    if request.get("new_session"):
        os.setsid()
    place(fds, request.get("fds", [0, 1, 2]))
    if "mask" in request:  # a relayed process's (a forkserver's: SIGINT blocked, as the process that started it had it)
        signal.pthread_sigmask(signal.SIG_SETMASK, request["mask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["script_dir"], *extra, *BASE_PATH]
    import warnings

    flags = request.get("flags", [])  # a relayed process's interpreter flags (multiprocessing passes -B and -W)
    sys.dont_write_bytecode = "-B" in flags or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    options = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    options += [flag[2:] or flags[i + 1] for i, flag in enumerate(flags) if flag.startswith("-W")]
    sys.warnoptions[:] = options
    warnings._processoptions(options)
    unbuffered = "-u" in flags or bool(os.environ.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = os.fdopen(fd, "w", buffering=1 if (unbuffered or os.isatty(fd) or name == "stderr") else -1,
                           encoding="utf-8", errors="backslashreplace" if name == "stderr" else "strict",
                           closefd=False)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.stdin = sys.__stdin__ = os.fdopen(0, "r", closefd=False)
    if not (request.get("real_forkservers") or "mask" in request):  # a relayed process ("mask") is one already
        relay_forkservers()
    if not request.get("real_slurm_tasks"):
        relay_slurm_tasks()
    if request["program"] == "-m":  # as `python -m MODULE ARGS…`: run_command runs the module as __main__
        sys.argv[:] = request["args"]
        return
    if request["program"] == "-c":  # as `python -c CODE ARGS…`: argv without the code, a __main__ of its own
        sys.argv[:] = ["-c", *request["args"][1:]]
        sys.modules["__main__"] = types.ModuleType("__main__")
        return
    sys.argv[:] = [request["argv0"], *request["args"]]
    main = sys.modules["__main__"]
    main.__file__ = request["argv0"]  # what a spawned process (ddp_spawn, loky's workers) re-imports as __mp_main__
    # ...unless, as after `python -m unlearnbench`, the main module has a spec named `<package>.__main__`: then
    # multiprocessing imports nothing for it (its body would run the command again)
    module = request["program"] == "-m unlearnbench"
    main.__spec__ = importlib.util.find_spec("unlearnbench.__main__") if module else None


def place(fds: list[int], targets: list[int]) -> None:
    """The received descriptors at the numbers the request names (0, 1, 2, then a forkserver's own), moved out of
    the way first so that none overwrites another."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, max(targets) + 1) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in zip(targets, moved, strict=True):
        os.dup2(fd, target)
        os.close(fd)


FORKSERVER_CODE = "from multiprocessing.forkserver import main"  # how multiprocessing's `-c` starts its forkserver
SERVER_FILE = os.path.abspath(__file__)  # this module (a command's `__main__.__file__` becomes its console script)
ADDRESS = ""  # the server's address, in the abstract namespace (set where the server starts)


def relay_forkservers() -> None:
    """In a forked command: where multiprocessing would start its forkserver as a fresh interpreter (5-8 s of
    imports of torch, Lightning and the job loop before its first fork), start `relay` instead, which has a process
    forked from this server (all of that imported) serve as the forkserver. What the command sees is the same: a
    child process to wait for, and a forkserver on its socket that forks the ranks or workers, with the command's
    descriptors, folder, environment, signal mask and interpreter flags. Tests of how a forkserver starts (its
    imports, a Ctrl-C meanwhile) ask for real ones (`real_forkservers`)."""
    from multiprocessing import util

    spawn = util.spawnv_passfds

    def spawnv_passfds(path, args, passfds):
        if "-c" in args and args[args.index("-c") + 1].startswith(FORKSERVER_CODE):
            args = [path, "-S", SERVER_FILE, "--relay", printable(ADDRESS), ",".join(map(str, passfds)), *args[1:]]
        return spawn(path, args, passfds)

    util.spawnv_passfds = spawnv_passfds


def relay_slurm_tasks() -> None:
    """In a forked command: SLURM's tasks, which submitit starts as `python -u -m submitit.core._submit FOLDER`
    (a fresh interpreter that imports torch, Lightning and the job loop before the job begins), start `relay`
    instead, which has a process forked from this server run that module. SLURM still starts, signals, kills and
    requeues the task's process, the relay, whose death takes the forked process with it. Tests of how the task
    itself starts ask for real ones (`real_slurm_tasks`)."""
    import shlex

    from submitit.slurm import slurm

    start = slurm.SlurmExecutor.__init__

    def __init__(self, *args, **kwargs):
        start(self, *args, **kwargs)
        self.python = " ".join(shlex.quote(part) for part in (sys.executable, "-S", SERVER_FILE, "--relay",
                                                               printable(ADDRESS), "-"))

    slurm.SlurmExecutor.__init__ = __init__


RELAYED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def relay(address: str, passed: list[int], arguments: list[str]) -> None:
    """Stand in for a `python [FLAGS] -c CODE` forkserver (`relay_forkservers`) or a `python [FLAGS] -m MODULE`
    SLURM task (`relay_slurm_tasks`): ask the server at `address` for a process forked from it to run the code or
    module with this process's descriptors (0, 1, 2 and `passed`), folder, environment, signal mask and interpreter
    flags; pass on the signals that would end it or that SLURM sends a task; end as it ends. A forkserver's relay
    ignores SIGINT, as the forkserver itself does (a terminal's Ctrl-C is the starting process's to handle); a
    task's passes it on."""
    sigint_default = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    split = next(i for i, argument in enumerate(arguments) if argument in ("-c", "-m"))
    program, args = arguments[split], arguments[split + 1:]
    module = program == "-m"
    if not module:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    request = {"program": program, "args": args, "cwd": os.getcwd(), "env": dict(os.environ), "argv0": program,
               "script_dir": os.getcwd() if module else "", "sigint_ignored": not sigint_default,
               "fds": [0, 1, 2, *passed], "mask": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
               "flags": arguments[:split]}
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(abstract(address))
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2, *passed])
    for fd in passed:
        os.close(fd)
    pid = json.loads(connection.recv(MESSAGE))["pid"]
    for signum in (*RELAYED_SIGNALS, *([signal.SIGINT] if module and sigint_default else [])):
        signal.signal(signum, lambda received, _: os.kill(pid, received))
    ended = connection.recv(MESSAGE)
    returncode = json.loads(ended)["returncode"] if ended else 1
    if returncode < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's disposition cannot change (nor needs to)
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    os._exit(returncode & 0xFF)


def run_command(request: dict) -> None:
    """The console script's body, in the forked child, ended as the interpreter ends it: the exit status of its
    SystemExit (a message printed, status 1), an uncaught exception's traceback and status 1, or death by SIGINT for
    an uncaught KeyboardInterrupt; then non-daemon threads joined, atexit handlers run and the streams flushed. Only
    the interpreter's teardown of every module, 1.5–2 s after these imports and nothing a command relies on, is left
    out (os._exit)."""
    import atexit
    import threading

    import unlearnbench.cli

    interrupted = False
    try:
        if request["program"] == "-c":
            exec(compile(request["args"][0], "<string>", "exec"), vars(sys.modules["__main__"]))
        elif request["program"] == "-m":
            import runpy

            runpy.run_module(request["args"][0], run_name="__main__", alter_sys=True)
        else:
            getattr(unlearnbench.cli, ENTRY_POINTS.get(request["program"], "main"))()  # `-m unlearnbench`: main
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException as error:
        sys.excepthook(type(error), error, error.__traceback__)
        code, interrupted = 1, isinstance(error, KeyboardInterrupt)
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


# --- the client -------------------------------------------------------------------------------------------------

class ForkServer:
    """The client's end: a session with the run's server (started by the first client that finds none), and a
    connection per process it asks for, whose exit comes back on it."""

    def __init__(self) -> None:
        self.address = run_address()
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{printable(self.address)[1:]}.log"
        self.session, self.pid = self.join()
        self.changed = threading.Condition()
        self.exited: dict[int, int | None] = {}  # None: the server ended before the process did
        self.alive = True
        threading.Thread(target=self.watch_session, daemon=True).start()

    def join(self, timeout: float = 300) -> tuple[socket.socket, int]:
        """A session with the run's server, and the server's pid. Where none is listening, start one (it listens at
        once, leaves this process, and answers when its imports are done); one that finds the address taken
        (another client started a server first) ends at once, and this client joins the one that holds it."""
        started, starts, deadline = None, 0, time.monotonic() + timeout
        while time.monotonic() < deadline:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            connection.settimeout(timeout)
            try:
                connection.connect(self.address)
                connection.send(json.dumps({"session": True}).encode())
                reply = connection.recv(MESSAGE)  # b"": the server ended meanwhile
            except (ConnectionRefusedError, FileNotFoundError):
                reply = None  # no server
            except OSError:
                reply = b""
            if reply:
                connection.settimeout(None)
                return connection, json.loads(reply)["pid"]
            connection.close()
            if reply is None and (started is None or started.poll() is not None):
                if (started is not None and started.returncode != 0) or starts == 3:  # (0: it serves, or lost the race)
                    raise RuntimeError(f"the fork server did not start (see {self.log})")
                starts += 1
                with open(self.log, "a") as log:
                    started = subprocess.Popen([sys.executable, __file__, "--serve", printable(self.address)],
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            time.sleep(0.05)
        raise RuntimeError(f"no fork server answered at {printable(self.address)} within {timeout} s (see {self.log})")

    def watch_session(self) -> None:
        with contextlib.suppress(OSError):
            self.session.recv(MESSAGE)  # nothing comes but the end
        with self.changed:
            self.alive = False
            self.changed.notify_all()

    def start(self, request: dict, fds: tuple[int, int, int]) -> int:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.connect(self.address)
            socket.send_fds(connection, [json.dumps(request).encode()], list(fds))
            reply = connection.recv(MESSAGE)
        except OSError:
            reply = b""
        if not reply:
            connection.close()
            raise RuntimeError("the fork server ended")
        pid = json.loads(reply)["pid"]
        threading.Thread(target=self.watch, args=(connection, pid), daemon=True).start()
        return pid

    def watch(self, connection: socket.socket, pid: int) -> None:
        """Wait for the process's exit on its connection (its end with the connection: the server is gone)."""
        try:
            ended = connection.recv(MESSAGE)
        except OSError:
            ended = b""
        connection.close()
        with self.changed:
            self.exited[pid] = json.loads(ended)["returncode"] if ended else None
            self.changed.notify_all()

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while pid not in self.exited:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.changed.wait(left)
            if self.exited[pid] is None:
                raise RuntimeError(f"the fork server ended before its process {pid} did (see {self.log})")
            return self.exited[pid]

    def close(self) -> None:
        """End this client's session (the server ends with the last one)."""
        with contextlib.suppress(OSError):
            # shut down first: the watching thread's blocked recv keeps the socket open through a close alone
            self.session.shutdown(socket.SHUT_RDWR)
            self.session.close()


def run_address() -> str:
    """The address of this test run's server, shared by the run's processes: pytest-xdist's workers (one run id)
    and what they start; a run without xdist gets its own (`RUN`). In the abstract namespace: nothing on disk to
    clean up, gone with the server."""
    return f"\0unlearnbench-forkserver-{os.geteuid()}-{os.environ.get('PYTEST_XDIST_TESTRUNUID') or RUN}"


# a run without xdist: the first process that imports this module, its id kept in the environment for its children
RUN = os.environ.setdefault("UNLEARNBENCH_FORKSERVER_RUN", str(os.getpid()))


def printable(address: str) -> str:
    """An abstract address as a command line can carry it: '@' for its leading NUL, as `ss` shows it."""
    return "@" + address[1:]


def abstract(printed: str) -> str:
    return "\0" + printed[1:]


class Forked:
    """A forked command as `subprocess.Popen` presents one (pid, poll, wait, signals, communicate). `program` is a
    console script, "-m unlearnbench" for `python -m unlearnbench` (the current folder first on sys.path), or "-c"
    for `python -c`, its code the first of `args`; `merged` sends stderr into stdout, as `stderr=subprocess.STDOUT`
    does (`stderr` is then None); `terminal`, a pseudo-terminal's follower end, takes both streams (`stdout` and
    `stderr` are then None: the test reads the leader end); `real_forkservers`: multiprocessing's forkservers start
    as fresh interpreters, as outside the tests, instead of as forks of this server (`relay_forkservers`);
    `real_slurm_tasks`: so do SLURM's tasks (`relay_slurm_tasks`)."""

    def __init__(self, server: ForkServer, program: str, args: list[str], cwd: Path, env: dict,
                 new_session: bool = False, sigint_default: bool = False, merged: bool = False,
                 terminal: int | None = None, real_forkservers: bool = False, real_slurm_tasks: bool = False) -> None:
        self.server, self.args, self.returncode = server, [program, *args], None
        if terminal is not None:
            stdout_read = stderr_read = None
            stdout_write, stderr_write = os.dup(terminal), os.dup(terminal)
        else:
            stdout_read, stdout_write = os.pipe()
            stderr_read, stderr_write = os.pipe() if not merged else (None, os.dup(stdout_write))
        stdin = os.open(os.devnull, os.O_RDONLY)
        # SIGINT as this process has it (ignored stays ignored, as across exec), or Python's default if asked
        sigint_ignored = not sigint_default and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        if program == "-m unlearnbench":
            import unlearnbench

            argv0, script_dir = str(Path(unlearnbench.__file__).with_name("__main__.py")), str(cwd)
        elif program == "-c":
            argv0, script_dir = "-c", ""  # `python -c` puts the current folder ('') first on sys.path
        else:
            argv0 = str(Path(sys.executable).parent / program)
            script_dir = str(Path(argv0).parent)
        request = {"program": program, "args": args, "cwd": str(cwd), "env": env, "new_session": new_session,
                   "sigint_ignored": sigint_ignored, "argv0": argv0,
                   "script_dir": script_dir, "real_forkservers": real_forkservers, "real_slurm_tasks": real_slurm_tasks}
        try:
            self.pid = server.start(request, (stdin, stdout_write, stderr_write))
        finally:
            for fd in (stdin, stdout_write, stderr_write):
                os.close(fd)
        self.stdout, self.stderr = (None if fd is None else os.fdopen(fd, "r", encoding="utf-8", errors="replace")
                                    for fd in (stdout_read, stderr_read))

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.returncode(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.returncode(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both streams to their end and the exit status, as `Popen.communicate` (the process is killed, and
        TimeoutExpired raised, past `timeout`)."""
        chunks: dict[str, list[str]] = {name: [] for name in ("stdout", "stderr") if getattr(self, name) is not None}
        readers = [threading.Thread(target=lambda n=name: chunks[n].append(getattr(self, n).read()), daemon=True)
                   for name in chunks]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        try:
            self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        for reader in readers:
            reader.join()
        for name in chunks:
            getattr(self, name).close()
        return "".join(chunks["stdout"]), "".join(chunks.get("stderr", [])) if "stderr" in chunks else None


_server: ForkServer | None = None


def server() -> ForkServer:
    """This test process's fork server, started on first use (and again if it ended)."""
    global _server
    if _server is None or not _server.alive:
        _server = ForkServer()
        import atexit

        atexit.register(_server.close)
    return _server


def run(program: str, args: list[str], cwd: Path, env: dict, timeout: float | None = None,
        **options) -> subprocess.CompletedProcess:
    """`subprocess.run([program, *args], capture_output=True, text=True, …)` for a console script, forked."""
    process = Forked(server(), program, args, cwd, env, **options)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(process.args, timeout) from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


if __name__ == "__main__" and sys.argv[1] == "--relay":  # the descriptors passed, or "-" for none
    relay(sys.argv[2], [int(fd) for fd in sys.argv[3].split(",") if fd.isdigit()], sys.argv[4:])
elif __name__ == "__main__":  # --serve ADDRESS
    ADDRESS = abstract(sys.argv[2])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(ADDRESS)  # claims the address before the imports: a second server ends here, having done none
    except OSError:
        sys.exit(0)
    listener.listen()  # clients wait in the backlog while the imports run
    if os.fork():  # the server leaves the process that started it: a test process whose cost monitor measures its
        os._exit(0)  # process tree would otherwise count every worker's commands in it
    BASE_PATH = [p for p in sys.path[1:]
                 if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    for name in PRELOAD:
        importlib.import_module(name)
    request = serve(listener)
    if request is None:
        os._exit(0)  # no teardown of every module: the address is free already
    del listener
    run_command(request)
