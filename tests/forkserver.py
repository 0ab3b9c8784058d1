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
Ctrl-C; there, and in SLURM's tasks, every process is a real interpreter. A forked `python -m unlearnbench` has
that main module's spec, as the interpreter gives it, so that multiprocessing's spawned processes do not run the
command again.

The forkserver that a forked command's multiprocessing starts (the local launcher's workers and ddp_spawn's ranks
are forked from it) would import torch, Lightning and the job loop again, 6-8 s each time: in a forked command it
is a fork of this server too (`relay_forkservers`), behind a small stand-in process that is the command's child.
The tests of how a forkserver starts (a Ctrl-C during its imports) ask for real ones.

Protocol (a SOCK_SEQPACKET socketpair): the client sends one JSON request with its stdin, stdout and stderr as file
descriptors; the server answers {"pid": N}, and {"exit": N, "returncode": R} when that process ends. A relay
connects to the server's own socket and sends one request, with the forkserver's descriptors too; the exit comes
back on that connection.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import selectors
import shutil
import signal
import socket
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
)
ENTRY_POINTS = {"unlearnbench": "main", "unlearnbench-report": "report_main"}  # console script → unlearnbench.cli
MESSAGE = 65536


# --- the server -------------------------------------------------------------------------------------------------

def serve(channel: socket.socket, spawner: socket.socket) -> dict | None:
    """Answer requests until the client closes the channel (None), or return a request in the forked child: the
    client's commands on `channel`, and on `spawner`'s connections the forkservers that those commands' multiprocessing
    starts (`relay`), one per connection, whose exit goes back on it."""
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    for source in (channel, spawner, wakeup_read):
        selector.register(source, selectors.EVENT_READ)
    owners: dict[int, socket.socket] = {}  # a relayed forkserver's pid → its relay's connection
    while True:
        for key, _ in selector.select():
            source = key.fileobj
            if source is spawner:
                selector.register(spawner.accept()[0], selectors.EVENT_READ)
                continue
            if source is wakeup_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wakeup_read, 4096)
                reap(channel, owners)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(source, MESSAGE, 16)
            except OSError:
                data, fds = b"", []
            if not data and source is channel:
                return None
            if source is not channel:  # one request per relay: its connection now waits for the exit
                selector.unregister(source)
            if not data:
                source.close()
                continue
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wakeup_read, wakeup_write):
                    os.close(fd)
                for sock in (channel, spawner, source, *owners.values()):
                    sock.close()
                become(request, fds)
                return request
            for fd in fds:
                os.close(fd)
            source.send(json.dumps({"pid": pid}).encode())
            if source is not channel:
                owners[pid] = source


def reap(channel: socket.socket, owners: dict[int, socket.socket]) -> None:
    """Report each ended child: a relayed forkserver's to its relay, a command's to the client."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        message = json.dumps({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode()
        owner = owners.pop(pid, None)
        if owner is None:
            channel.send(message)
            continue
        with contextlib.suppress(OSError):  # a relay that is gone (killed) hears nothing
            owner.send(message)
        owner.close()


INHERITED_SIGINT = None  # the server's SIGINT handler as Python set it at start-up (default, or ignored)
BASE_PATH: list[str] = []  # the interpreter's own sys.path entries (no script folder, no PYTHONPATH)


def become(request: dict, fds: list[int]) -> None:
    """Turn this forked child into the process the request describes (module docstring)."""
    signal.signal(signal.SIGINT, signal.default_int_handler if request.get("sigint_default") else INHERITED_SIGINT)
    if request.get("new_session"):
        os.setsid()
    place(fds, request.get("fds", [0, 1, 2]))
    if "mask" in request:  # a relayed forkserver's: SIGINT blocked, as the process that started it had it
        signal.pthread_sigmask(signal.SIG_SETMASK, request["mask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["script_dir"], *extra, *BASE_PATH]
    import warnings

    flags = request.get("flags", [])  # a relayed forkserver's interpreter flags (multiprocessing passes -B and -W)
    sys.dont_write_bytecode = "-B" in flags or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    options = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    options += [flag[2:] or flags[i + 1] for i, flag in enumerate(flags) if flag.startswith("-W")]
    sys.warnoptions[:] = options
    warnings._processoptions(options)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = os.fdopen(fd, "w", buffering=1 if (unbuffered or os.isatty(fd) or name == "stderr") else -1,
                           encoding="utf-8", errors="backslashreplace" if name == "stderr" else "strict",
                           closefd=False)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.stdin = sys.__stdin__ = os.fdopen(0, "r", closefd=False)
    if not (request.get("real_forkservers") or "mask" in request):  # a relayed forkserver ("mask") is one already
        relay_forkservers()
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
SERVER_PID = os.getpid()
SPAWNER = ""  # the address of the server's socket for relayed forkservers (set where the server starts)


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
            args = [path, "-S", SERVER_FILE, "--relay", SPAWNER, ",".join(map(str, passfds)), *args[1:]]
        return spawn(path, args, passfds)

    util.spawnv_passfds = spawnv_passfds


def relay(address: str, passed: list[int], arguments: list[str]) -> None:
    """Stand in for a forkserver (`relay_forkservers`): ask the server at `address` for a process forked from it to
    run the `-c` code with this process's descriptors (0, 1, 2 and `passed`), folder, environment, signal mask and
    interpreter flags, pass on the signals that would end it, and end as it ends. SIGINT is ignored, as the
    forkserver itself ignores it: a terminal's Ctrl-C is the starting process's to handle."""
    sigint_default = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    split = arguments.index("-c")
    request = {"program": "-c", "args": arguments[split + 1:], "cwd": os.getcwd(), "env": dict(os.environ),
               "argv0": "-c", "script_dir": "", "sigint_default": sigint_default, "fds": [0, 1, 2, *passed],
               "mask": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])), "flags": arguments[:split]}
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(address)
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2, *passed])
    for fd in passed:
        os.close(fd)
    pid = json.loads(connection.recv(MESSAGE))["pid"]
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, lambda received, _: os.kill(pid, received))
    ended = connection.recv(MESSAGE)
    returncode = json.loads(ended)["returncode"] if ended else 1
    if returncode < 0:
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
    """The client's end: start the server, ask it for processes, learn when they end."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel = mine
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"unlearnbench-forkserver-{os.getpid()}.log"
        with open(self.log, "w") as log:
            self.server = subprocess.Popen([sys.executable, __file__, str(theirs.fileno())],
                                           pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=log)
        theirs.close()
        ready = self.channel.recv(MESSAGE)
        if ready != b"ready":
            raise RuntimeError(f"the fork server did not start (see {self.log})")
        self.lock = threading.Lock()
        self.changed = threading.Condition()
        self.started: list[int] = []
        self.exited: dict[int, int] = {}
        self.alive = True
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        while True:
            try:
                data = self.channel.recv(MESSAGE)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.alive = False
                    self.changed.notify_all()
                    return
                message = json.loads(data)
                if "pid" in message:
                    self.started.append(message["pid"])
                else:
                    self.exited[message["exit"]] = message["returncode"]
                self.changed.notify_all()

    def start(self, request: dict, fds: tuple[int, int, int]) -> int:
        with self.lock, self.changed:
            socket.send_fds(self.channel, [json.dumps(request).encode()], list(fds))
            while not self.started:
                if not self.alive:
                    raise RuntimeError("the fork server ended")
                self.changed.wait()
            return self.started.pop()

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while pid not in self.exited:
                left = None if deadline is None else deadline - time.monotonic()
                if not self.alive or (left is not None and left <= 0):
                    return None
                self.changed.wait(left)
            return self.exited[pid]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            # shut down first: the reader thread's blocked recv keeps the socket open through a close alone, so the
            # server would never see its end, outlive the tests and make `wait` below sit out its 10 s
            self.channel.shutdown(socket.SHUT_RDWR)
            self.channel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.server.wait(timeout=10)


class Forked:
    """A forked command as `subprocess.Popen` presents one (pid, poll, wait, signals, communicate). `program` is a
    console script, "-m unlearnbench" for `python -m unlearnbench` (the current folder first on sys.path), or "-c"
    for `python -c`, its code the first of `args`; `merged` sends stderr into stdout, as `stderr=subprocess.STDOUT`
    does (`stderr` is then None); `terminal`, a pseudo-terminal's follower end, takes both streams (`stdout` and
    `stderr` are then None: the test reads the leader end); `real_forkservers`: multiprocessing's forkservers start
    as fresh interpreters, as outside the tests, instead of as forks of this server (`relay_forkservers`)."""

    def __init__(self, server: ForkServer, program: str, args: list[str], cwd: Path, env: dict,
                 new_session: bool = False, sigint_default: bool = False, merged: bool = False,
                 terminal: int | None = None, real_forkservers: bool = False) -> None:
        self.server, self.args, self.returncode = server, [program, *args], None
        if terminal is not None:
            stdout_read = stderr_read = None
            stdout_write, stderr_write = os.dup(terminal), os.dup(terminal)
        else:
            stdout_read, stdout_write = os.pipe()
            stderr_read, stderr_write = os.pipe() if not merged else (None, os.dup(stdout_write))
        stdin = os.open(os.devnull, os.O_RDONLY)
        if program == "-m unlearnbench":
            import unlearnbench

            argv0, script_dir = str(Path(unlearnbench.__file__).with_name("__main__.py")), str(cwd)
        elif program == "-c":
            argv0, script_dir = "-c", ""  # `python -c` puts the current folder ('') first on sys.path
        else:
            argv0 = str(Path(sys.executable).parent / program)
            script_dir = str(Path(argv0).parent)
        request = {"program": program, "args": args, "cwd": str(cwd), "env": env, "new_session": new_session,
                   "sigint_default": sigint_default, "argv0": argv0, "script_dir": script_dir,
                   "real_forkservers": real_forkservers}
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


def spawner_socket() -> socket.socket:
    """The server's listening socket for relays (`relay`), in a folder of its own that only this user can enter."""
    import tempfile

    global SPAWNER
    SPAWNER = str(Path(tempfile.mkdtemp(prefix="unlearnbench-forkserver-")) / "relay")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(SPAWNER)
    listener.listen()
    return listener


if __name__ == "__main__" and sys.argv[1] == "--relay":
    relay(sys.argv[2], [int(fd) for fd in sys.argv[3].split(",") if fd], sys.argv[4:])
elif __name__ == "__main__":
    channel = socket.socket(fileno=int(sys.argv[1]))
    INHERITED_SIGINT = signal.getsignal(signal.SIGINT)
    BASE_PATH = [p for p in sys.path[1:]
                 if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    for name in PRELOAD:
        importlib.import_module(name)
    spawner = spawner_socket()
    channel.send(b"ready")
    try:
        request = serve(channel, spawner)
    finally:
        if os.getpid() == SERVER_PID:  # the server, at its end: not a forked child
            shutil.rmtree(Path(SPAWNER).parent, ignore_errors=True)
    if request is not None:
        del channel
        run_command(request)
