"""Test helpers: composing configs, running jobs in-process or through the real console script."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import io
import json
import os
import subprocess
import sys
import traceback
import types
import unittest.mock
from pathlib import Path

import forkserver
from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parent.parent

# A digits setting that trains in about a second per model on 2 CPU cores and still learns (~85% test accuracy).
TINY = ["model.width=8", "train.epochs=3", "train.milestones=[2]", "train.batch_size=64", "train.lr=0.05",
        "runtime.threads=1", "runtime.print_table=false"]


def compose_config(overrides: list[str], return_hydra_config: bool = False) -> DictConfig:
    """The config `unlearnbench <overrides>` composes, the caller's own copy. Hydra composes each override list once
    per process (0.1 s a composition, hundreds of them in a run); a copy costs 3 ms. With the `hydra` node, composed
    afresh each time: it holds the working folder at composition."""
    if return_hydra_config:
        return composed(tuple(overrides), True)
    return copy.deepcopy(composed_once(tuple(overrides)))


def composed(overrides: tuple[str, ...], return_hydra_config: bool = False) -> DictConfig:
    with initialize_config_module("unlearnbench.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


composed_once = functools.cache(composed)  # a failed composition is not kept: it raises again each time


def with_paths(overrides: list[str], tmp_path: Path, cache_dir: Path | None = None) -> DictConfig:
    """The composed config with the data and model cache folders pointed into `tmp_path` (the cache into `cache_dir`
    where given: conftest's `shared_cache`), as `paths.data_dir=… paths.cache_dir=…` before the overrides would
    (set after composing, so that the tests' many folders share one composition)."""
    cfg = compose_config(overrides)
    given = {o.split("=", 1)[0] for o in overrides}
    for key, folder in (("paths.data_dir", tmp_path / "data"), ("paths.cache_dir", cache_dir or tmp_path / "cache")):
        if key not in given:
            OmegaConf.update(cfg, key, str(folder))
    return cfg


def plain_config(overrides: list[str], tmp_path: Path, cache_dir: Path | None = None) -> dict:
    """A resolved config as plain data, with the paths a job needs pointed into `tmp_path` (the model cache into
    `cache_dir` where given: conftest's `shared_cache`)."""
    return OmegaConf.to_container(with_paths(overrides, tmp_path, cache_dir), resolve=True)


def run_in_process(overrides: list[str], tmp_path: Path, methods: list[str], cache_dir: Path | None = None,
                   method_options: dict[str, list[str]] | None = None):
    """Run a job's body on one CPU process (no Hydra job folder): the fast way to test what a job computes.
    `method_options` holds further overrides of single methods (`{"unsir": ["method.noise_steps=25"]}`)."""
    cfg = with_paths([o for o in overrides if not o.startswith("method.")], tmp_path, cache_dir)
    shared = [o for o in overrides if o.startswith("method.")]
    return run_config(cfg, tmp_path, {m: [*shared, *(method_options or {}).get(m, [])] for m in methods})


def run_config(cfg: DictConfig, folder: Path, methods: dict[str, list[str]]):
    """Run a job's body on one CPU process from a composed config (`cfg_tiny`, conftest.py): each method's config as
    `+method=name` gives it in this setting, with its own `method.x=v` overrides."""
    from lightning_fabric import Fabric

    from unlearnbench.core.job import JobPlan, execute

    config = OmegaConf.to_container(cfg, resolve=True)
    method_configs = [method_in(cfg, name, options) for name, options in methods.items()]
    fabric = Fabric(accelerator="cpu", devices=1, precision=config["precision"]["fabric"])
    return execute(fabric, JobPlan(config, method_configs, str(folder)))


@functools.cache
def method_node(name: str) -> DictConfig:
    """conf/method/<name>.yaml as Hydra composes it, its interpolations unresolved (composed once per run)."""
    return compose_config([f"+method={name}"]).method


def method_in(cfg: DictConfig, name: str, options: list[str] = ()) -> dict:
    """The method config `+method=name` gives the job `cfg` (its interpolations, `${scenario.batch_size}`, resolved
    against `cfg`), with `method.x=v` overrides applied."""
    merged = OmegaConf.merge(cfg, {"method": method_node(name)}, OmegaConf.from_dotlist(list(options)))
    return OmegaConf.to_container(merged.method, resolve=True)


def run_cli(args: list[str], tmp_path: Path, sweep: str = "sweep", timeout: int = 600,
            program: str = "unlearnbench", fork: bool = True, env: dict | None = None,
            figures: bool = False) -> subprocess.CompletedProcess:
    """The console script in a process of its own, with its sweep folder and cache under `tmp_path`: forked from a
    server that has imported torch and the project (forkserver.py: a real process without 5–8 s of imports), or,
    with `fork=False`, the installed script itself started by the operating system. The sweep's report is a quick
    one (`QUICK_REPORT`) unless `figures` or the arguments say otherwise."""
    if program == "unlearnbench":
        folders = {"hydra.sweep.dir": tmp_path / sweep, "paths.cache_dir": tmp_path / "cache",
                   "paths.data_dir": tmp_path / "data"}
        quick = {key: value for key, value in QUICK_REPORT.items() if not (figures and key == "report.figures")}
        args = with_defaults(args, {**folders, **quick})
    env = {**(os.environ if env is None else env), "PYTHONWARNINGS": "ignore"}
    if fork:
        return forkserver.run(program, args, tmp_path, env, timeout=timeout)
    return subprocess.run([str(Path(sys.executable).parent / program), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=env)


def run_forked(command: list[str], cwd: Path, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True)` for a command of the installed console script (a
    script the test runs in its own process starts it so), forked from the fork server with this environment."""
    program = Path(command[0])
    assert program.parent == Path(sys.executable).parent and program.name in forkserver.ENTRY_POINTS, command
    return forkserver.run(program.name, command[1:], cwd, dict(os.environ), timeout=timeout)


def user_environment() -> dict:
    """This environment as a user's shell has it: without the test run's unlearnbench variables and PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("UNLEARNBENCH_", "PYTHONPATH"))}


def script(path: Path):
    """The Python file at `path` (a script of scripts/ or benchmarks/) as a module, its `main` not run; in
    `sys.modules`, as an imported module is (a dataclass of a module with postponed annotations looks it up there)."""
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def forked_subprocess(cwd: Path, timeout: float = 900) -> types.SimpleNamespace:
    """A stand-in for a script's `subprocess` module: its `run` of a console-script command forks it from the fork
    server (`run_forked`) in `cwd` (or the call's own), and raises `CalledProcessError` where `check` is set and the
    command failed, as `subprocess.run` does."""
    def run(command: list[str], check: bool = False, cwd: Path = cwd, **_) -> subprocess.CompletedProcess:
        done = run_forked(command, Path(cwd), timeout=timeout)
        if check and done.returncode:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done

    return types.SimpleNamespace(run=run)


def run_main(module, argv: list[str], folder: Path, timeout: float = 900) -> types.SimpleNamespace:
    """A script's `main` (`script`) in this process, in `folder`, with `argv`, its sweeps forked from the fork
    server (`forked_subprocess`): its exit status, what it printed, and why it stopped (its own refusal or failure,
    or a sweep's stderr)."""
    printed, returncode, reason = io.StringIO(), 0, ""
    with contextlib.chdir(folder), contextlib.redirect_stdout(printed), \
            unittest.mock.patch.object(sys, "argv", argv), \
            unittest.mock.patch.object(module, "subprocess", forked_subprocess(folder, timeout), create=True):
        try:
            module.main()
        except SystemExit as stop:
            code = stop.code
            returncode, reason = (code or 0) if isinstance(code, int | None) else 1, "" if code is None else str(code)
        except subprocess.CalledProcessError as failed:
            returncode, reason = failed.returncode, failed.stderr
    return types.SimpleNamespace(returncode=returncode, stdout=printed.getvalue(), stderr=reason)


def forked_popen(command: list[str], **options) -> forkserver.Forked:
    """`unlearnbench.api.run_sweep`'s `subprocess.Popen` of `python -m unlearnbench`, forked from the fork server
    (forkserver.py: the same process without 5–8 s of imports)."""
    assert command[:3] == [sys.executable, "-m", "unlearnbench"], command
    return forkserver.Forked(forkserver.server(), "-m unlearnbench", command[3:], Path.cwd(), options["env"],
                             new_session=options.get("start_new_session", False),
                             merged=options.get("stderr") == subprocess.STDOUT)


FORKING = types.SimpleNamespace(Popen=forked_popen, PIPE=subprocess.PIPE, STDOUT=subprocess.STDOUT)  # for api's


def run_example(source: str, folder: Path, env: dict) -> subprocess.CompletedProcess:
    """A Python example of the docs, as `python example.py` runs it in `folder` with the environment `env`, but in
    this process: its `run_sweep` forks the sweep (`forked_popen`) instead of starting two interpreters. What it
    prints is the stdout; an exception's traceback the stderr, with status 1."""
    import unlearnbench.api

    printed, status, error = io.StringIO(), 0, ""
    with contextlib.chdir(folder), contextlib.redirect_stdout(printed), \
            unittest.mock.patch.dict(os.environ, env, clear=True), \
            unittest.mock.patch.object(unlearnbench.api, "subprocess", FORKING):
        try:
            exec(compile(source, str(folder / "example.py"), "exec"), {"__name__": "__main__"})
        except Exception:
            status, error = 1, traceback.format_exc()
    return subprocess.CompletedProcess(["example.py"], status, printed.getvalue(), error)


# A sweep's own report where a test reads neither its figures (1–2 s a sweep) nor its forgetting quality's
# permutation null closely (100 random splits by default, most of a small sweep's report: 0.9 of 1.9 CPU-s).
QUICK_REPORT = {"report.figures": "false", "report.permutations": "10"}

# the report's kinds of figure (report/render/figures.py's `draw`)
FIGURE_KINDS = ("leaderboard", "seed_study", "designs", "wasserstein", "variance", "ranks", "forget_quality",
                "trajectories", "curves", "dynamics", "plane")


def drawing_only(*kept: str):
    """Within it, the report draws only the kinds of figure `kept`, for a script that copies those into the docs:
    the others, which no assertion there reads, are not drawn (most of a report's time; their drawing is tested in
    test_report_sweep.py). A kind the report no longer has fails here, by name."""
    from unlearnbench.report.render import figures  # (matplotlib: imported where a test draws)

    assert set(kept) <= set(FIGURE_KINDS), kept
    return unittest.mock.patch.multiple(figures, **{kind: lambda study, folder: [] for kind in FIGURE_KINDS
                                                    if kind not in kept})


def with_defaults(args: list[str], defaults: dict) -> list[str]:
    """`args` with `key=value` added for each default whose key they do not set."""
    return [*args, *(f"{key}={value}" for key, value in defaults.items()
                     if not any(a.startswith(f"{key}=") for a in args))]


def default_sigint() -> None:
    """`preexec_fn` for a process that a test interrupts: Python's default SIGINT, as in a terminal, even where this
    process was started with SIGINT ignored (`make test &`: a background job of a non-interactive shell)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def results(folder: Path) -> dict[str, dict]:
    """result.json of every job folder under a sweep folder, by folder name."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(folder.glob("*/result.json"))}


def values(result: dict, **match) -> list:
    return [r["value"] for r in result["records"] if all(r[k] == v for k, v in match.items())]


@functools.cache
def method_configs() -> dict[str, dict]:
    """Every method config of conf/method/, as Hydra composes it (resolved in the default setting), by name."""
    return {path.stem: OmegaConf.to_container(compose_config([f"+method={path.stem}"]).method, resolve=True)
            for path in sorted((REPO / "conf" / "method").glob("*.yaml"))}


@functools.cache
def image_methods(scenario: str) -> list[str]:
    """Names of the image-classification methods that serve `scenario` (each method config composed once: whom a
    method serves depends on the scenario alone)."""
    from unlearnbench.core.components import build, target_of

    cfg = compose_config([f"scenario={scenario}"])
    scenario_object = build(OmegaConf.to_container(cfg.scenario), "scenario")
    return [name for name, method in method_configs().items()
            if target_of(method, "method").task == "image"
            and build(method, "method").serves(scenario_object)]


def make_task(data, scenario, target: str, model_factory, seed: int = 0, cache_dir: Path | None = None,
              fabric=None, model_name: str = "resnet18"):
    """An UnlearningTask built by hand (no job): for unit tests of methods on tiny models and data.

    `model_factory()` returns a fresh model; the original model is one drawn with seed 1000, the random teacher
    draws from the generator it is given, `memo` caches under `cache_dir` (or recomputes every time without it).
    """
    import tempfile

    import torch
    from lightning_fabric import Fabric

    from unlearnbench.runtime.cache import ModelCache, cache_key, tensor_digest
    from unlearnbench.runtime.monitor import Cost
    from unlearnbench.runtime.seeding import global_seed, streams
    from unlearnbench.tasks.image.data.transforms import Normalizer
    from unlearnbench.tasks.image.methods.base import UnlearningTask

    fabric = fabric or Fabric(accelerator="cpu", devices=1)
    splits = scenario.split(data, target, streams("forget_set", seed).torch)
    with global_seed(1000):
        original = model_factory()
    state = {k: v.clone() for k, v in original.state_dict().items()}

    def load():
        model = model_factory()
        model.load_state_dict(state)
        return model

    def random_model(generator):
        with global_seed(int(torch.randint(2**62, (1,), generator=generator))):
            return model_factory()

    cache = ModelCache(cache_dir or tempfile.mkdtemp())

    original_key = cache_key({name: tensor_digest(tensor) for name, tensor in state.items()})

    def memo(kind, parts, build):
        return cache.get_or_build(cache_key({"artefact": kind, "model": original_key, **parts}), build)

    task = UnlearningTask(fabric, model_name, data, splits, scenario, target, Normalizer(data.mean, data.std),
                          streams("method", seed, "test", target), load, random_model, load(), Cost(1.0, 0.0, 0.0),
                          memo)
    return task, load


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str):
    """A real, tiny filesystem at `folder` (a full disk on demand), unmounted afterwards; the test is skipped where
    mounting is not allowed (not root, or no mount namespace)."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


RELEARN_METRICS = ("relearn_steps", "relearn_acc")


def relearnt(outcome) -> dict:
    """A job's relearn-time records: (target, role, method, metric, split) → value."""
    return {(r["target"], r["role"], r["method"], r["metric"], r["split"]): r["value"] for r in outcome.records
            if r["metric"] in RELEARN_METRICS}


def assert_relearn_records(outcome, methods: list[str], split: str, max_steps: int) -> None:
    """Relearn time recorded for M_o, M_r and every method on every target's `split` (steps an int in
    0..max_steps, accuracy in [0, 1]), each model's relearning a stage of the job's timings."""
    assert outcome.error is None and not outcome.failures, outcome.trace
    records = relearnt(outcome)
    models = [("original", None), ("retrained", None), *(("unlearned", m) for m in methods)]
    targets = {key[0] for key in records}
    assert targets and set(records) == {(t, role, method, metric, split) for t in targets for role, method in models
                                        for metric in RELEARN_METRICS}
    for (_, _, _, metric, _), value in records.items():
        if metric == "relearn_steps":
            assert isinstance(value, int) and 0 <= value <= max_steps
        else:
            assert isinstance(value, float) and 0.0 <= value <= 1.0
    assert {"relearn:original", "relearn:retrained", *(f"relearn:{m}" for m in methods)} <= set(outcome.timings)

