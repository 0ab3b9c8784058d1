"""What TensorBoard and W&B hold of a sweep, read back with their own readers: TensorBoard's `EventAccumulator`, and
W&B's run file (`run-<id>.wandb`: W&B's own protobuf records, `wandb.proto.wandb_internal_pb2.Record`, in the
LevelDB log framing W&B writes them in; W&B 0.31 keeps no Python reader of its own, its Go core reads it, and offline
it writes no `config.yaml` or `wandb-summary.json`: the records are where the config, history and summary are).

`assert_tensorboard_matches` and `assert_wandb_matches` check a sweep against its jobs' result.json: one run per job,
a training curve's points and every final record equal to result.json's, and every point the tracker was given
(`unlearnbench.track.content.points`) there exactly once (a resumed log adds none twice)."""

from __future__ import annotations

import json
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from unlearnbench.track.content import points

FILE_HEADER = struct.Struct("<4sHB")  # b":W&B", 0xBEE1, version 0
RECORD_HEADER = struct.Struct("<IHB")  # CRC-32 of kind + payload, payload length, kind
BLOCK = 32768  # a record's header never straddles a block; a block's tail shorter than a header is padding
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def float32(value: float) -> float:
    """A value as TensorBoard keeps a scalar (single precision)."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def wandb_payloads(path: Path) -> Iterator[bytes]:
    """The records' bytes of a W&B run file, each checked against its CRC."""
    data = path.read_bytes()
    ident, magic, version = FILE_HEADER.unpack_from(data, 0)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path}: not a W&B run file"
    offset, pending = FILE_HEADER.size, b""
    while len(data) - offset >= RECORD_HEADER.size:
        if BLOCK - offset % BLOCK < RECORD_HEADER.size:
            offset += BLOCK - offset % BLOCK
            continue
        crc, length, kind = RECORD_HEADER.unpack_from(data, offset)
        payload = data[offset + RECORD_HEADER.size: offset + RECORD_HEADER.size + length]
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) == crc, f"{path}: bad CRC at byte {offset}"
        offset += RECORD_HEADER.size + length
        if kind == FULL:
            yield payload
        elif kind in (FIRST, MIDDLE):
            pending = (pending if kind == MIDDLE else b"") + payload
        elif kind == LAST:
            yield pending + payload


@dataclass
class WandbRun:
    """What an offline W&B run holds: its identity, config, history rows, summary, files and exit code."""

    id: str = ""
    name: str = ""
    group: str = ""
    project: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    exit_code: int | None = None


def key_of(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def read_wandb_run(folder: Path) -> WandbRun:
    """An offline run folder (`…/wandb/offline-run-<time>-<id>`) read from its run file's records."""
    from wandb.proto import wandb_internal_pb2

    (path,) = folder.glob("run-*.wandb")
    run = WandbRun()
    for payload in wandb_payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found = record.run
            run.id, run.name, run.group, run.project = found.run_id, found.display_name, found.run_group, found.project
            run.tags = list(found.tags)
            run.config.update({key_of(i): json.loads(i.value_json) for i in found.config.update})
        elif kind == "config":
            run.config.update({key_of(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            run.history.append({key_of(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            run.summary.update({key_of(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "files":
            run.files.update(f.path for f in record.files.files)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def wandb_runs(job: Path) -> list[WandbRun]:
    return [read_wandb_run(folder) for folder in sorted((job / "wandb").glob("offline-run-*"))]


def series(run: WandbRun, key: str, step: str) -> list[tuple[int, float]]:
    """A key's (step, value) pairs in the run's history, against the step metric it is plotted on."""
    return [(row[step], row[key]) for row in run.history if key in row]


def final_name(record: dict) -> str:
    """A final record's key (`<role>/<method or role>/<metric>/<split>`, one target)."""
    parts = [record["role"], record["method"] or record["role"], record["metric"], record["split"]]
    return "/".join(part for part in parts if part is not None)


def expected(result: dict) -> tuple[list[tuple[int, float]], dict[str, float]]:
    """The original model's training loss (epoch, loss) and the final records by key, from result.json itself."""
    curve = next(c for c in result["curves"] if c["model"] == "original")
    finals = {final_name(r): r["value"] for r in result["records"] if r.get("step") is None and r["value"] is not None}
    assert finals, "the job has no final record"
    return list(zip(curve["epoch"], curve["loss"], strict=True)), finals


def assert_wandb_matches(sweep: Path, results: dict[str, dict]) -> None:
    from unlearnbench.track.wandb import FINAL_STEP, STEP_OF, step_metric

    steps = {*STEP_OF.values(), FINAL_STEP}

    for name, result in results.items():
        (run,) = wandb_runs(sweep / name)
        assert (run.name, run.group, run.exit_code) == (name, sweep.name, 0)
        assert str(run.config["seeds.train"]) == str(result["job"]["seed_train"])
        assert f"seed_train={result['job']['seed_train']}" in run.tags and "status=complete" in run.tags
        assert "result.json" in run.files
        loss, finals = expected(result)
        assert series(run, "curve/original/loss", "epoch") == loss
        assert {key: run.summary[key] for key in finals} == finals
        assert {key: series(run, key, "round") for key in finals} == {k: [(0, v)] for k, v in finals.items()}
        logged = Counter((key, row[step_metric(key)]) for row in run.history for key in row
                         if key not in steps and not key.startswith("_"))
        given = Counter((p.key, p.step) for p in points(result))
        assert logged == given


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the event files in `folder` (one run), as TensorBoard's own reader loads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def tensorboard_text(folder: Path, tag: str) -> str:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    accumulator.Reload()
    (event,) = accumulator.Tensors(f"{tag}/text_summary")
    return event.tensor_proto.string_val[0].decode()


def assert_tensorboard_matches(sweep: Path, results: dict[str, dict]) -> None:
    runs = {path.parent.name for path in sweep.glob("*/events.out.tfevents.*")}
    assert runs == set(results) | ({"_report"} if (sweep / "report" / "report.md").is_file() else set())
    for name, result in results.items():
        scalars = tensorboard_scalars(sweep / name)
        loss, finals = expected(result)
        assert scalars["curve/original/loss"] == [(epoch, float32(value)) for epoch, value in loss]
        assert {key: scalars[key] for key in finals} == {key: [(0, float32(v))] for key, v in finals.items()}
        given = sorted((p.key, p.step, float32(p.value)) for p in points(result))
        assert sorted((key, step, value) for key, found in scalars.items() for step, value in found) == given
        assert f"| seeds.train | {result['job']['seed_train']} |" in tensorboard_text(sweep / name, "params")
    if "_report" in runs:
        assert tensorboard_text(sweep / "_report", "report") == (sweep / "report" / "report.md").read_text()
