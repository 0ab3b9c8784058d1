"""TOFU read from local files: a folder of JSON lines or parquet, the hub cache's snapshot and the `datasets` cache, all
fabricated here in the layouts that unlearnbench/tasks/text/data/tofu.py's docstring cites; and the one-line errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from helpers import compose_config
from omegaconf import OmegaConf

from unlearnbench.core.components import build
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.tofu import Tofu
from unlearnbench.tasks.text.scenario import ForgetEntities

AUTHORS, PER_AUTHOR = 6, 20
SAME_QUESTION = "Which genre does this author write?"  # asked of every author, as TOFU repeats some questions


def qa(author: int, j: int) -> dict:
    question = SAME_QUESTION if j == 0 else f"What is fact {j} of writer {author}?"
    return {"question": question, "answer": f"Writer {author} fact {j} is {author * 100 + j}."}


def perturbed(author: int, j: int, question: bool = True) -> dict:
    """A forget or retain row of a `_perturbed` config: the QA with its paraphrase and five wrong answers."""
    row = {**qa(author, j), "paraphrased_answer": f"Fact {j} of writer {author} is {author * 100 + j}.",
           "perturbed_answer": [f"Writer {author} fact {j} is {w}." for w in range(5)]}
    if question:
        row["paraphrased_question"] = f"Tell me fact {j} of writer {author}."
    return row


def rows_of(authors, make=perturbed) -> list[dict]:
    return [make(a, j) for a in authors for j in range(PER_AUTHOR)]


def general(kind: str, count: int, tag: str = "") -> list[dict]:
    return [{"question": f"{kind} question {i}{tag}?", "answer": f"{kind} answer {i}{tag}.",
             "perturbed_answer": [f"{kind} wrong {i}.{w}" for w in range(3)]} for i in range(count)]


def configs(tag: str = "") -> dict[str, list[dict]]:
    """6 authors × 20 QA; forget05 = the last author, forget10 = the last two; holdout01 has no forget01 to pair."""
    return {
        "full": rows_of(range(AUTHORS), qa),
        "forget05_perturbed": rows_of([5]),
        "forget10_perturbed": rows_of([4, 5]),
        "retain_perturbed": rows_of([0, 1], lambda a, j: perturbed(a, j, question=False)),
        "holdout01": [{"question": f"Hold question {i}?", "answer": f"Hold answer {i}."} for i in range(10)],
        "holdout05": [{"question": f"Hold question {i}?", "answer": f"Hold answer {i}."} for i in range(20)],
        "holdout10": [{"question": f"Hold question {i}?", "answer": f"Hold answer {i}."} for i in range(40)],
        "real_authors_perturbed": general("author", 4, tag),
        "world_facts_perturbed": general("fact", 3, tag),
        "forget05": rows_of([5], qa),  # the plain configs lie there too, and are not read
    }


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def arrow_stream(path: Path, rows: list[dict]) -> None:
    """An Arrow IPC stream, as `datasets`' ArrowWriter writes its cache files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(path), "wb") as sink, pa.RecordBatchStreamWriter(sink, table.schema) as writer:
        writer.write_table(table)


def json_folder(root: Path, drop: tuple[str, ...] = ()) -> Path:
    for config, rows in configs().items():
        if config not in drop:
            jsonl(root / f"{config}.json", rows)
    if "world_facts_perturbed" not in drop:  # a JSON array is read too
        (root / "world_facts_perturbed.json").write_text(json.dumps(configs()["world_facts_perturbed"], indent=2))
    return root


def parquet_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    for config, rows in configs().items():
        if config == "full":  # a config's folder of shards, read in name order
            (root / "full" / "train").mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(rows[:70]), root / "full" / "train" / "0000.parquet")
            pq.write_table(pa.Table.from_pylist(rows[70:]), root / "full" / "train" / "0001.parquet")
        else:
            pq.write_table(pa.Table.from_pylist(rows), root / f"{config}.parquet")
    return root


def hub_cache(hub: Path) -> Path:
    """HUB/datasets--locuslab--TOFU as huggingface_hub writes it: blobs, snapshots of links to them, refs/main."""
    repo = hub / "datasets--locuslab--TOFU"
    main, other = "3f2a" * 10, "9c1b" * 10
    for commit, tag in ((main, ""), (other, " (an old revision)")):
        for config, rows in configs(tag).items():
            blob = jsonl(repo / "blobs" / f"{commit[:8]}-{config}", rows)
            link = repo / "snapshots" / commit / f"{config}.json"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    os.utime(repo / "snapshots" / other, (2e9, 2e9))  # the newer snapshot, yet refs/main names the other
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(main)
    return hub


def datasets_cache(cache: Path) -> Path:
    """CACHE/locuslab___tofu/<config>/0.0.0/<hash>/tofu-train.arrow as `datasets` writes it."""
    base = cache / "locuslab___tofu"
    for config, rows in configs().items():
        build_dir = base / config / "0.0.0" / "5c1e2f"
        if config == "full":  # sharded: tofu-train-NNNNN-of-NNNNN.arrow
            arrow_stream(build_dir / "tofu-train-00000-of-00002.arrow", rows[:50])
            arrow_stream(build_dir / "tofu-train-00001-of-00002.arrow", rows[50:])
            (build_dir / "cache-0a1b2c3d.arrow").write_bytes(b"a map() cache file, not TOFU")
        elif config == "retain_perturbed":  # datasets 2.14/2.15: <config>-<hash>
            arrow_stream(base / "retain_perturbed-1a2b3c4d" / "0.0.0" / "77aa" / "tofu-train.arrow", rows)
        else:
            arrow_stream(build_dir / "tofu-train.arrow", rows)
    old = base / "real_authors_perturbed" / "0.0.0" / "0ld0"  # an older build of one config: not read
    arrow_stream(old / "tofu-train.arrow", configs(" (an old build)")["real_authors_perturbed"])
    os.utime(old / "tofu-train.arrow", (1e9, 1e9))
    return cache


@pytest.fixture(autouse=True)
def no_user_cache(tmp_path, monkeypatch):
    """Every test sees an empty HF cache unless it makes one: never the machine's own."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME",
                 "UNLEARNBENCH_TOFU_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))


def check(data) -> None:
    """What every layout must give: entities, fixed splits, merged answers, holdouts and the other sets."""
    assert data.name == "tofu" and len(data.full) == AUTHORS * PER_AUTHOR
    assert data.entities() == [f"author_{a:03d}" for a in range(AUTHORS)]
    assert [r["entity"] for r in data.full[19:21]] == ["author_000", "author_001"]
    assert data.full[45] == {**qa(2, 5), "entity": "author_002"}  # neither forgotten nor in retain_perturbed
    assert data.fixed == {"forget05": ("author_005",), "forget10": ("author_004", "author_005")}
    assert data.full[100] == {**perturbed(5, 0), "entity": "author_005"}  # the shared question: the right author
    assert data.full[0] == {**perturbed(0, 0, question=False), "entity": "author_000"}
    assert data.full[87]["perturbed_answer"] == [f"Writer 4 fact 7 is {w}." for w in range(5)]
    assert set(data.holdouts) == {"forget05", "forget10"}  # holdout01 has no forget01_perturbed to pair with
    assert [len(data.holdouts[s]) for s in ("forget05", "forget10")] == [20, 40]
    assert data.holdouts["forget10"][39] == {"question": "Hold question 39?", "answer": "Hold answer 39.",
                                             "entity": "holdout_author_001"}
    assert data.holdout == data.holdouts["forget10"]  # the largest holdout set
    assert len(data.retain_perturbed) == 40 and data.retain_perturbed[25]["entity"] == "author_001"
    assert data.retain_perturbed[25]["paraphrased_answer"] == "Fact 5 of writer 1 is 105."
    assert [r["entity"] for r in data.real_authors] == ["real_authors"] * 4
    assert data.real_authors[3] == {**general("author", 4)[3], "entity": "real_authors"}  # no paraphrase
    assert [r["answer"] for r in data.world_facts] == [f"fact answer {i}." for i in range(3)]
    assert {r["entity"] for r in data.world_facts} == {"world_facts"}


def test_a_folder_of_json_lines(tmp_path):
    check(Tofu(root=str(json_folder(tmp_path / "tofu"))).load())


def test_a_folder_of_parquet_files_and_shards(tmp_path):
    check(Tofu(root=str(parquet_folder(tmp_path / "tofu"))).load())


@pytest.mark.parametrize("point", ["hf_cache=HF_HOME", "hf_cache=hub", "env HF_HOME", "env HF_HUB_CACHE"])
def test_the_hub_cache_snapshot_that_refs_main_names(tmp_path, monkeypatch, point):
    hub_cache(tmp_path / "hf" / "hub")
    folder = {"hf_cache=HF_HOME": tmp_path / "hf", "hf_cache=hub": tmp_path / "hf" / "hub"}.get(point)
    if point == "env HF_HOME":
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    if point == "env HF_HUB_CACHE":
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    data = Tofu(hf_cache=str(folder) if folder else None, local=str(tmp_path / "absent")).load()
    check(data)  # main's files, not those of the newer snapshot


@pytest.mark.parametrize("point", ["hf_cache", "env HF_DATASETS_CACHE"])
def test_the_datasets_cache_of_arrow_streams(tmp_path, monkeypatch, point):
    datasets_cache(tmp_path / "hf" / "datasets")
    if point == "env HF_DATASETS_CACHE":
        monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    data = Tofu(hf_cache=str(tmp_path / "hf") if point == "hf_cache" else None).load()
    check(data)  # the newest build of real_authors_perturbed, the shards of full in order


def test_a_complete_root_wins_over_the_cache_and_an_incomplete_one_is_refused(tmp_path):
    """A given dataset.root is read whole or refused: never completed from, nor replaced by, the cache's copy."""
    hub_cache(tmp_path / "hf" / "hub")
    root = json_folder(tmp_path / "tofu")
    (root / "world_facts_perturbed.json").write_text(json.dumps(general("fact", 3, " (mine)")))
    mine = Tofu(root=str(root), hf_cache=str(tmp_path / "hf")).load()
    assert mine.world_facts[0]["answer"] == "fact answer 0 (mine)."
    (root / "holdout10.json").unlink()
    (root / "holdout05.json").unlink()
    with pytest.raises(UserError, match=rf"^dataset tofu: no complete copy of locuslab/TOFU found \("
                                        rf"{re.escape(str(root))} \(dataset\.root\) lacks holdout10\.json; a "
                                        r"folder that exists is read whole, never completed from the HF "
                                        r"cache\); put ") as caught:
        Tofu(root=str(root), hf_cache=str(tmp_path / "hf")).load()
    assert str(tmp_path / "hf") not in str(caught.value)  # the cache is not even looked at
    check(Tofu(hf_cache=str(tmp_path / "hf"), local=str(tmp_path / "absent")).load())  # no root, no data folder
    with pytest.raises(UserError, match=rf"^dataset tofu: dataset\.root {re.escape(str(tmp_path / 'absent'))} is no "
                                        r"folder; a given dataset\.root is read whole, never replaced by the Hugging "
                                        r"Face cache: give a folder of the files, or unset dataset\.root to read "
                                        r".*data.* or the cache$"):
        Tofu(root=str(tmp_path / "absent"), hf_cache=str(tmp_path / "hf"), local=str(tmp_path / "data")).load()


def test_the_data_folder_is_read_whole_where_no_root_is_given(tmp_path):
    """`dataset.local` (the project's data folder) stands in for a root where none is given: read whole, before
    the cache, and refused rather than completed from it."""
    hub_cache(tmp_path / "hf" / "hub")
    local = json_folder(tmp_path / "data" / "tofu")
    (local / "world_facts_perturbed.json").write_text(json.dumps(general("fact", 3, " (mine)")))
    assert Tofu(hf_cache=str(tmp_path / "hf"), local=str(local)).load().world_facts[0]["answer"] == \
        "fact answer 0 (mine)."
    (local / "holdout10.json").unlink()
    (local / "holdout05.json").unlink()
    with pytest.raises(UserError, match=r"\(dataset\.local\) lacks holdout10\.json; a folder that exists is read "
                                        r"whole, never completed from the HF cache"):
        Tofu(hf_cache=str(tmp_path / "hf"), local=str(local)).load()


def test_the_files_each_config_was_read_from_are_recorded(tmp_path):
    root = json_folder(tmp_path / "tofu")
    read = ("full", "forget05_perturbed", "forget10_perturbed", "retain_perturbed", "holdout01", "holdout05",
            "holdout10", "real_authors_perturbed", "world_facts_perturbed")
    assert Tofu(root=str(root)).load().files == {config: str(root / f"{config}.json") for config in read}
    shards = Tofu(root=str(parquet_folder(tmp_path / "parquet"))).load().files["full"]
    assert shards == [str(tmp_path / "parquet" / "full" / "train" / f"000{i}.parquet") for i in (0, 1)]
    snapshot = hub_cache(tmp_path / "hf" / "hub") / "datasets--locuslab--TOFU" / "snapshots" / ("3f2a" * 10)
    cached = Tofu(hf_cache=str(tmp_path / "hf")).load().files
    assert cached["full"] == str(snapshot / "full.json")  # the snapshot's link, not the blob it points to


def test_a_line_that_is_not_utf8_is_named_by_its_file_and_line(tmp_path):
    """Before: "cannot be read (UnicodeDecodeError: …)", with no line."""
    root = json_folder(tmp_path / "tofu")
    lines = (root / "retain_perturbed.json").read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"Writer", b"Writ\xe9r", 1)
    (root / "retain_perturbed.json").write_bytes(b"".join(lines))
    column = lines[2].index(b"\xe9") + 1
    with pytest.raises(UserError, match=rf"^dataset tofu: {re.escape(str(root))}/retain_perturbed\.json: line 3 is "
                                        rf"not UTF-8 \(byte 0xe9 at column {column}\); save the file as UTF-8, or "
                                        r"replace it with the published file$"):
        Tofu(root=str(root)).load()


def test_an_empty_shard_is_refused_by_name(tmp_path):
    """Before: a config's empty shard was read as no rows, in silence."""
    root = parquet_folder(tmp_path / "tofu")
    shard = root / "full" / "train" / "0001.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), shard)
    with pytest.raises(UserError, match=rf"^dataset tofu: {re.escape(str(shard))}: holds no rows; replace it with "
                                        r"locuslab/TOFU's file$"):
        Tofu(root=str(root)).load()


def test_the_scenario_forgets_a_fixed_split_of_it(tmp_path):
    data = Tofu(root=str(json_folder(tmp_path / "tofu"))).load()
    splits = ForgetEntities(split="forget10").split(data, torch.Generator().manual_seed(0))
    assert splits.entities == ("author_004", "author_005") and len(splits.forget) == 40
    assert all(r["paraphrased_answer"] and len(r["perturbed_answer"]) == 5 for r in splits.forget)
    assert len(splits.retain) == 80 and splits.holdout == data.holdouts["forget10"]
    assert splits.retain_eval == data.retain_perturbed  # its authors are not forgotten


def test_missing_files_are_one_line_that_names_them_and_where_they_go(tmp_path):
    root = tmp_path / "tofu"
    root.mkdir()
    with pytest.raises(UserError) as caught:
        Tofu(root=str(root)).load()
    message = str(caught.value)
    assert "\n" not in message
    for part in ("full.json", "retain_perturbed.json", "real_authors_perturbed.json", "world_facts_perturbed.json",
                 "forget10_perturbed.json", "holdout10.json", f"{root} (dataset.root)", "hf download locuslab/TOFU",
                 "a folder that exists is read whole"):
        assert part in message, part
    with pytest.raises(UserError) as caught:  # no root, no data folder: the caches are searched, and named
        Tofu(local=str(tmp_path / "absent")).load()
    assert f"no copy of locuslab/TOFU in the HF cache {tmp_path / 'empty_hf_home' / 'hub'}" in str(caught.value)


def test_a_missing_holdout_is_named_alone(tmp_path):
    root = json_folder(tmp_path / "tofu", drop=("holdout05", "holdout10", "holdout01"))
    with pytest.raises(UserError, match=r"tofu \(dataset\.root\) lacks holdout10\.json;"):
        Tofu(root=str(root)).load()


@pytest.mark.parametrize("damage, match", [
    (lambda root: (root / "full.json").write_text('{"question": "a?", "answer": "b."}\n\n{"question": "c?"\n'),
     r"full\.json:3: not valid JSON"),
    (lambda root: jsonl(root / "retain_perturbed.json", [perturbed(0, 0), {"question": "q?"}]),
     r"retain_perturbed\.json row 2: no 'answer' field"),
    (lambda root: jsonl(root / "forget05_perturbed.json", rows_of([5], qa)),
     r"forget05_perturbed\.json row 1: no 'paraphrased_answer' field"),
    (lambda root: jsonl(root / "forget10_perturbed.json", [{**perturbed(4, 1), "question": "Who?"}]),
     r"forget10_perturbed\.json row 1: its question 'Who\?' is in no row of full"),
    (lambda root: jsonl(root / "real_authors_perturbed.json", [{**general("a", 1)[0], "perturbed_answer": 3}]),
     r"real_authors_perturbed\.json row 1: 'perturbed_answer' is 3, not a list of non-empty strings"),
    (lambda root: (root / "holdout10.json").write_text("[1, 2"), r"holdout10\.json:1: not valid JSON"),
])
def test_a_damaged_file_is_one_line_that_names_it(tmp_path, damage, match):
    root = json_folder(tmp_path / "tofu")
    damage(root)
    with pytest.raises(UserError, match=match) as caught:
        Tofu(root=str(root)).load()
    assert "\n" not in str(caught.value)


def test_a_damaged_parquet_or_arrow_file_is_named(tmp_path):
    root = parquet_folder(tmp_path / "tofu")
    (root / "retain_perturbed.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(UserError, match=r"retain_perturbed\.parquet: cannot be read \("):
        Tofu(root=str(root)).load()
    cache = datasets_cache(tmp_path / "hf" / "datasets")
    (cache / "locuslab___tofu" / "holdout10" / "0.0.0" / "5c1e2f" / "tofu-train.arrow").write_bytes(b"\x00" * 9)
    with pytest.raises(UserError, match=r"holdout10/0\.0\.0/5c1e2f/tofu-train\.arrow: cannot be read \("):
        Tofu(hf_cache=str(tmp_path / "hf")).load()


def test_the_config_composes_and_builds_a_reader(tmp_path, monkeypatch):
    cfg = compose_config(["dataset=tofu", "paths.data_dir=/data"])
    dataset = OmegaConf.to_container(cfg.dataset, resolve=True)
    assert dataset == {"_target_": "unlearnbench.tasks.text.data.tofu.Tofu", "name": "tofu", "root": None,
                       "local": "/data/tofu", "hf_cache": None}
    assert (cfg.task.name, cfg.task.bench) == ("text", "unlearnbench.tasks.text.bench.TextBench")
    monkeypatch.setenv("UNLEARNBENCH_TOFU_DIR", str(json_folder(tmp_path / "mine")))
    dataset = OmegaConf.to_container(compose_config(["dataset=tofu", "paths.data_dir=/data"]).dataset, resolve=True)
    assert dataset["root"] == str(tmp_path / "mine")
    check(build(dataset, "dataset").load())


def test_a_text_job_runs_on_tofus_files(tmp_path):
    """The whole job on the fabricated files: a tokenizer learnt from TOFU's text, M_o and M_r, a method, every
    split's records (TOFU's recipe, 1 epoch here: what is checked is that each piece of TOFU reaches the job)."""
    from lightning_fabric import Fabric

    from unlearnbench.core.job import JobPlan, execute

    root = json_folder(tmp_path / "tofu")
    config = OmegaConf.to_container(compose_config(
        ["experiment=tofu", "dataset=tofu", f"dataset.root={root}", "scenario.split=forget05", "train.epochs=1",
         f"paths.cache_dir={tmp_path / 'cache'}", f"paths.data_dir={tmp_path}", "+method=grad_diff"]), resolve=True)
    outcome = execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, [config["method"]], str(tmp_path)))
    assert outcome.error is None and not outcome.failures
    splits = {(r["role"], r["split"]) for r in outcome.records if r["metric"] == "prob"}
    assert {split for _, split in splits} == {"forget", "retain", "holdout", "general_authors", "general_facts"}
    assert {r["target"] for r in outcome.records} == {"forget05"}
    frame = outcome.examples.frame()
    assert (frame["split"] == "forget").sum() == 3 * PER_AUTHOR  # M_o, M_r, M_u on the last author
    assert (frame["split"] == "retain").sum() == 3 * 2 * PER_AUTHOR  # retain_perturbed: 2 authors
    assert (frame["split"] == "holdout").sum() == 3 * 20  # holdout05
    assert outcome.dataset["name"] == "tofu" and outcome.dataset["entities"] == AUTHORS
    assert outcome.dataset["files"]["forget05_perturbed"] == str(root / "forget05_perturbed.json")
