"""MUSE's and WMDP's published files, fabricated small in their layouts (muse-bench/MUSE-News's
`<config>/<split>-*.parquet`, its older split names, the hub cache's snapshot; cais/wmdp's
`wmdp-<subset>/test-*.parquet`, the corpora's `.jsonl`, MMLU's `<subject>/test-*.parquet`), read by the datasets and
run through a job; the built-in
generators; and the one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import compose_config, with_paths
from hydra.errors import ConfigCompositionException
from lightning_fabric import Fabric
from omegaconf import OmegaConf

from unlearnbench.core.components import build
from unlearnbench.core.job import JobPlan, execute
from unlearnbench.core.plan import plan_job
from unlearnbench.core.result import document
from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.data.muse import MuseFiles, muse_fictitious
from unlearnbench.tasks.text.data.wmdp import Wmdp, wmdp_fictitious

ARTICLES = [f"Article {i} tells how the mill of town {i} burned in year {1900 + i} and was built again." for i in
            range(12)]


def parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def muse_folder(root: Path, old_names: bool = False, drop: tuple[str, ...] = ()) -> Path:
    """MUSE-News's layout, 12 small articles: forget 0-2, retain1 3-5, retain2 6-8, holdout 9-11."""
    text = lambda idx: [{"text": ARTICLES[i]} for i in idx]  # noqa: E731
    qa = lambda idx: [{"question": f"When did the mill of town {i} burn?", "answer": f"{1900 + i}"} for i in idx]  # noqa: E731
    retain = "retain2" if old_names else "retain"
    files = {"raw/forget": text(range(3)), "raw/retain1": text(range(3, 6)), "raw/retain2": text(range(6, 9)),
             "raw/holdout": text(range(9, 12)),
             "verbmem/forget": [{"prompt": " ".join(ARTICLES[i].split()[:8]), "gt": " ".join(ARTICLES[i].split()[8:])}
                                for i in range(3)],
             "knowmem/forget_qa": qa(range(1, 3)), "knowmem/forget_qa_icl": qa(range(1)),
             f"knowmem/{retain}_qa": qa(range(7, 9)), f"knowmem/{retain}_qa_icl": qa(range(6, 7)),
             "privleak/forget": text(range(3)), f"privleak/{retain}": text(range(6, 9)),
             "privleak/holdout": text(range(9, 12))}
    for name, rows in files.items():
        if name not in drop:
            parquet(root / f"{name}-00000-of-00001.parquet", rows)
    return root


@pytest.fixture(autouse=True)
def no_user_cache(tmp_path, monkeypatch):
    """Every test sees an empty HF cache unless it makes one: never the machine's own."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))


@pytest.mark.parametrize("old_names", [False, True])
def test_muses_folder_is_read_with_the_current_and_the_older_split_names(tmp_path, old_names):
    data = MuseFiles("muse_news", "muse-bench/MUSE-News", str(muse_folder(tmp_path / "muse", old_names))).load()
    assert (data.forget, data.retain, data.extra) == (ARTICLES[:3], ARTICLES[3:6], ARTICLES[6:9])
    asked = [{"question": f"When did the mill of town {i} burn?", "answer": f"{1900 + i}"} for i in (7, 8)]
    assert data.probes["knowmem_retain"] == asked
    assert [row["text"] for row in data.probes["privleak_retain"]] == ARTICLES[6:9]
    assert data.probes["verbmem"][0]["gt"] == "0 burned in year 1900 and was built again."
    assert data.new_tokens == {}  # MUSE's generation lengths (benchmarks/muse.py NEW_TOKENS)


def test_the_hub_cache_snapshot_is_read_offline(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    repo = hub / "datasets--muse-bench--MUSE-News"
    muse_folder(repo / "snapshots" / ("ab" * 20))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("ab" * 20)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    data = MuseFiles("muse_news", "muse-bench/MUSE-News", local=str(tmp_path / "nothing_here")).load()
    assert data.forget == ARTICLES[:3]


def test_a_missing_muse_file_is_one_line_naming_it_and_where_the_files_go(tmp_path):
    root = muse_folder(tmp_path / "muse", drop=("knowmem/forget_qa_icl", "privleak/holdout"))
    with pytest.raises(UserError, match=rf"^dataset muse_news: {re.escape(str(root))} \(dataset\.root\) lacks "
                                        r"knowmem/forget_qa_icl-\*\.parquet, privleak/holdout-\*\.parquet; put "
                                        r"muse-bench/MUSE-News's files there \(hf download muse-bench/MUSE-News "
                                        r"--repo-type dataset --local-dir DIR, then dataset\.root=DIR\); a "
                                        r"folder that exists is read whole, never completed from the Hugging "
                                        r"Face cache$"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load()
    with pytest.raises(UserError, match=r"^dataset muse_news: no complete copy of muse-bench/MUSE-News in the "
                                        r"Hugging Face cache \(.*\): it lacks raw/forget-\*\.parquet, .*; put "
                                        r"muse-bench/MUSE-News's files there"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", local=str(tmp_path / "absent")).load()
    with pytest.raises(UserError, match=r"^dataset muse_news: dataset\.root .*absent is no folder; a given "
                                        r"dataset\.root is read whole, never replaced by the Hugging Face cache"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(tmp_path / "absent")).load()


def hub_snapshot(hub: Path) -> Path:
    """HUB/datasets--muse-bench--MUSE-News with one snapshot of every file, named by refs/main."""
    repo = hub / "datasets--muse-bench--MUSE-News"
    muse_folder(repo / "snapshots" / ("cd" * 20))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("cd" * 20)
    return hub


def test_a_muse_root_missing_one_file_is_refused_though_the_hub_cache_holds_every_file(tmp_path, monkeypatch):
    """A given dataset.root is read whole or refused: never completed from, nor replaced by, a hub snapshot."""
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_snapshot(tmp_path / "hub")))
    root = muse_folder(tmp_path / "muse", drop=("privleak/holdout",))
    with pytest.raises(UserError, match=rf"^dataset muse_news: {re.escape(str(root))} \(dataset\.root\) lacks "
                                        r"privleak/holdout-\*\.parquet; put .* never completed from the Hugging Face "
                                        r"cache$"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load()
    with pytest.raises(UserError, match=r"^dataset muse_news: dataset\.root .*elsewhere is no folder; a given "
                                        r"dataset\.root is read whole, never replaced by the Hugging Face cache"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(tmp_path / "elsewhere")).load()  # a mistyped root


def test_the_files_each_part_was_read_from_are_recorded(tmp_path, monkeypatch):
    root = muse_folder(tmp_path / "muse", old_names=True)
    files = MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load().files
    assert files == {f"{config}/{split}": str(root / config / f"{found}-00000-of-00001.parquet")
                     for config, split, found in (
                         ("raw", "forget", "forget"), ("raw", "retain1", "retain1"), ("raw", "retain2", "retain2"),
                         ("verbmem", "forget", "forget"), ("knowmem", "forget_qa", "forget_qa"),
                         ("knowmem", "forget_qa_icl", "forget_qa_icl"), ("knowmem", "retain_qa", "retain2_qa"),
                         ("knowmem", "retain_qa_icl", "retain2_qa_icl"), ("privleak", "forget", "forget"),
                         ("privleak", "holdout", "holdout"), ("privleak", "retain", "retain2"))}
    snapshot = hub_snapshot(tmp_path / "hub") / "datasets--muse-bench--MUSE-News" / "snapshots" / ("cd" * 20)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cached = MuseFiles("muse_news", "muse-bench/MUSE-News", local=str(tmp_path / "absent")).load().files
    assert cached["raw/forget"] == str(snapshot / "raw" / "forget-00000-of-00001.parquet")
    built_in = muse_fictitious(articles=4, icl=2)
    assert set(built_in.files) == set(files) and set(built_in.files.values()) == {"built-in"}
    assert muse_fictitious(articles=4, icl=2).fingerprint() == built_in.fingerprint()


def empty_parquet(path: Path, fields: tuple[str, ...]) -> None:
    """A parquet file with the split's columns and no row."""
    pq.write_table(pa.table({name: pa.array([], pa.string()) for name in fields}), path)


@pytest.mark.parametrize(("part", "fields"), [("privleak/holdout", ("text",)), ("knowmem/forget_qa",
                                                                               ("question", "answer")),
                                              ("raw/retain2", ("text",))])
def test_an_empty_muse_file_is_refused_when_it_is_read(tmp_path, part, fields):
    """Before: an empty privleak/holdout failed with KeyError 'holdout' after M_o and M_r trained; an empty
    knowmem/forget_qa gave KnowMem NaN and exit 0."""
    root = muse_folder(tmp_path / "muse")
    empty_parquet(root / f"{part}-00000-of-00001.parquet", fields)
    with pytest.raises(UserError, match=rf"^dataset muse_news: {re.escape(str(root))}/{part}-00000-of-00001\.parquet: "
                                        r"holds no rows; replace it with the published file$"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load()


def not_utf8_parquet(path: Path, texts: list[bytes]) -> None:
    """A parquet file whose `text` column holds the bytes as written, UTF-8 or not (as a damaged file does)."""
    column = pa.Array.from_buffers(pa.string(), len(texts), pa.array(texts, pa.binary()).buffers())
    pq.write_table(pa.table({"text": column}), path)


def test_a_muse_string_that_is_not_utf8_is_named_by_its_file_row_and_column(tmp_path):
    root = muse_folder(tmp_path / "muse")
    not_utf8_parquet(root / "raw" / "forget-00000-of-00001.parquet", [b"fine", b"caf\xe9 au lait", b"fine"])
    with pytest.raises(UserError, match=rf"^dataset muse_news: {re.escape(str(root))}/raw/forget-00000-of-00001"
                                        r"\.parquet: row 1 is not UTF-8 \(its 'text'\); replace the file with the "
                                        r"published one$"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load()


def test_a_muse_row_without_its_field_is_named(tmp_path):
    root = muse_folder(tmp_path / "muse")
    parquet(root / "verbmem" / "forget-00000-of-00001.parquet", [{"prompt": "a beginning", "answer": "no gt"}])
    with pytest.raises(UserError, match=r"verbmem/forget-00000-of-00001\.parquet, row 0: no 'gt' string; the split's "
                                        r"rows have prompt, gt$"):
        MuseFiles("muse_news", "muse-bench/MUSE-News", str(root)).load()


QUESTIONS = [{"question": f"Which port does service {i} use?", "choices": [str(p) for p in range(i, i + 4)],
              "answer": i % 4} for i in range(6)]


def wmdp_folder(root: Path, subset: str = "cyber") -> Path:
    parquet(root / f"wmdp-{subset}" / "test-00000-of-00001.parquet", QUESTIONS)
    corpora = root / "wmdp-corpora"
    corpora.mkdir(parents=True)
    if subset == "bio":  # bio's forget corpus: JSON objects with a text field
        lines = [json.dumps({"title": f"paper {i}", "text": ARTICLES[i]}) for i in range(3)]
    else:
        lines = ARTICLES[:3]
    (corpora / f"{subset}-forget-corpus.jsonl").write_text("\n".join(lines) + "\n")
    (corpora / f"{subset}-retain-corpus.jsonl").write_text("\n".join(ARTICLES[3:6]) + "\n")
    return root


@pytest.mark.parametrize("subset", ["cyber", "bio"])
def test_wmdps_questions_and_corpora_are_read_with_the_built_in_general_questions(tmp_path, subset):
    root = wmdp_folder(tmp_path / "wmdp", subset)
    data = Wmdp("wmdp", str(root), subset, str(root / "wmdp-corpora")).load()
    assert data.forget == ARTICLES[:3]
    built_in = wmdp_fictitious(1, 40, 0)
    assert data.retain == ARTICLES[3:6] + built_in.retain  # the general questions' corpus added to learn them from
    assert data.probes["general"] == built_in.probes["general"]
    subject = {"cyber": "cybersecurity", "bio": "biology"}[subset]
    assert data.probes["forget"] == [{**q, "subject": subject} for q in QUESTIONS]


def test_mmlu_format_files_give_the_general_questions_with_their_subjects(tmp_path):
    root = wmdp_folder(tmp_path / "wmdp")
    mmlu = tmp_path / "mmlu"
    rows = [{"question": "What is 2 + 2?", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"],
             "answer": 1}]
    parquet(mmlu / "elementary_mathematics" / "test-00000-of-00001.parquet", rows)
    data = Wmdp("wmdp", str(root), "cyber", str(root / "wmdp-corpora"), general=str(mmlu)).load()
    assert data.probes["general"] == [{**rows[0], "subject": "elementary mathematics"}]
    assert data.retain == ARTICLES[3:6]
    with pytest.raises(UserError, match=r"^dataset wmdp: no test-\*\.parquet under .*empty \(dataset\.general\); put "
                                        r"MMLU-format files there"):
        Wmdp("wmdp", str(root), "cyber", str(root / "wmdp-corpora"), general=str(tmp_path / "empty")).load()


def test_a_wmdp_corpus_line_that_is_not_utf8_is_named_by_its_file_and_line(tmp_path):
    """Before: Python's UnicodeDecodeError, with no file or line."""
    root = wmdp_folder(tmp_path / "wmdp")
    corpus = root / "wmdp-corpora" / "cyber-forget-corpus.jsonl"
    corpus.write_bytes(b"first text\nsecond text\nthe caf\xe9 text\n")
    with pytest.raises(UserError, match=rf"^dataset wmdp: {re.escape(str(corpus))}: line 3 is not UTF-8 \(byte 0xe9 "
                                        r"at column 8\); save the file as UTF-8, or replace it with the published "
                                        r"file$"):
        Wmdp("wmdp", str(root), "cyber", str(root / "wmdp-corpora")).load()


@pytest.mark.parametrize("empty", ["forget corpus", "retain corpus", "questions", "mmlu"])
def test_an_empty_wmdp_file_is_refused_when_it_is_read(tmp_path, empty):
    root = wmdp_folder(tmp_path / "wmdp")
    mmlu = tmp_path / "mmlu" / "anatomy" / "test-00000-of-00001.parquet"
    parquet(mmlu, [{"question": "Q?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 0}])
    path = {"forget corpus": root / "wmdp-corpora" / "cyber-forget-corpus.jsonl",
            "retain corpus": root / "wmdp-corpora" / "cyber-retain-corpus.jsonl",
            "questions": root / "wmdp-cyber" / "test-00000-of-00001.parquet", "mmlu": mmlu}[empty]
    if path.suffix == ".jsonl":
        path.write_text("\n\n")
        problem = r"holds no text; each line of a WMDP corpus is one text \(use the file of WMDP's wmdp-corpora " \
                  r"release\)"
    else:
        pq.write_table(pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.int64())}), path)
        problem = r"holds no rows; replace it with the published file"
    with pytest.raises(UserError, match=rf"^dataset wmdp: {re.escape(str(path))}: {problem}$"):
        Wmdp("wmdp", str(root), "cyber", str(root / "wmdp-corpora"), general=str(tmp_path / "mmlu")).load()


def test_wmdps_files_are_recorded_and_the_built_in_parts_say_so(tmp_path):
    root = wmdp_folder(tmp_path / "wmdp")
    data = Wmdp("wmdp", str(root), "cyber", str(root / "wmdp-corpora")).load()
    corpora = root / "wmdp-corpora"
    assert data.files == {"questions": str(root / "wmdp-cyber" / "test-00000-of-00001.parquet"),
                          "forget_corpus": str(corpora / "cyber-forget-corpus.jsonl"),
                          "retain_corpus": str(corpora / "cyber-retain-corpus.jsonl"), "general": "built-in"}
    for subject in ("anatomy", "virology"):
        parquet(tmp_path / "mmlu" / subject / "test-00000-of-00001.parquet",
                [{"question": "Q?", "subject": subject, "choices": ["a", "b", "c", "d"], "answer": 0}])
    with_mmlu = Wmdp("wmdp", str(root), "cyber", str(corpora), general=str(tmp_path / "mmlu")).load()
    assert with_mmlu.files["general"] == [str(tmp_path / "mmlu" / s / "test-00000-of-00001.parquet")
                                          for s in ("anatomy", "virology")]
    assert wmdp_fictitious(questions=2, general=2).files == dict.fromkeys(
        ("questions", "forget_corpus", "retain_corpus", "general"), "built-in")


def test_the_built_in_sets_are_the_same_for_a_seed_and_differ_between_seeds():
    assert muse_fictitious(seed=4) == muse_fictitious(seed=4) != muse_fictitious(seed=5)
    assert wmdp_fictitious(seed=4) == wmdp_fictitious(seed=4) != wmdp_fictitious(seed=5)
    muse = muse_fictitious(articles=5, icl=2)
    assert [len(muse.probes[p]) for p in ("verbmem", "knowmem_forget", "knowmem_forget_icl", "privleak_holdout")] == [
        5, 5, 2, 5]
    line = re.compile(r"Question: .* (?:does|of) (\w+ \w+)(?: play| keep)?\?\nAnswer: .*")
    people = lambda texts: {m.group(1) for t in texts if (m := line.fullmatch(t))}  # noqa: E731
    assert len(people(muse.forget) | people(muse.retain) | people(muse.extra)) == 15  # disjoint people, 2 lines each
    assert sum(text.startswith("Question: ") for text in muse.forget) == 2 * 5
    for row in muse.probes["verbmem"]:  # the prompt and its continuation are a forget article's prose
        assert any(f"{row['prompt']} {row['gt']}" in text for text in muse.forget)
    wmdp = wmdp_fictitious(questions=6, general=5)
    answers = [q["choices"][q["answer"]] for q in wmdp.probes["forget"]]
    assert all(f"listens on port {port}." in text for port, text in zip(answers, wmdp.forget, strict=False))
    assert {q["answer"] for q in wmdp_fictitious().probes["forget"]} == {0, 1, 2, 3}


def run(overrides: list[str], tmp_path: Path):
    config = OmegaConf.to_container(compose_config([*overrides, f"paths.cache_dir={tmp_path / 'cache'}",
                                                    f"paths.data_dir={tmp_path}", "train.epochs=1"]), resolve=True)
    return execute(Fabric(accelerator="cpu", devices=1), JobPlan(config, [config["method"]], str(tmp_path)))


def test_a_job_runs_on_muse_news_files(tmp_path):
    root = muse_folder(tmp_path / "muse")
    outcome = run(["experiment=muse", "dataset=muse_news", f"dataset.root={root}", "+method=npo"], tmp_path)
    assert outcome.error is None and not outcome.failures
    recorded = {(r["role"], r["metric"], r["split"]) for r in outcome.records if r["metric"] != "time_s"}
    metrics = {("verbmem_rouge", "forget"), ("knowmem_rouge", "forget"), ("knowmem_rouge", "retain"),
               ("privleak", "forget"), ("mia_min_k_auc", "forget"), ("extraction_strength", "forget")}
    assert {(m, s) for role, m, s in recorded if role == "unlearned"} >= metrics
    assert outcome.dataset["name"] == "muse_news" and outcome.dataset["forget"] == 3
    files = json.loads(json.dumps(document({}, outcome, None)))["dataset"]["files"]  # as result.json holds them
    assert files["raw/forget"] == str(root / "raw" / "forget-00000-of-00001.parquet") and len(files) == 11


def test_an_empty_muse_holdout_fails_the_job_before_any_model_trains(tmp_path):
    """Before: KeyError 'holdout' once M_o and M_r had trained."""
    root = muse_folder(tmp_path / "muse")
    empty_parquet(root / "privleak" / "holdout-00000-of-00001.parquet", ("text",))
    outcome = run(["experiment=muse", "dataset=muse_news", f"dataset.root={root}", "+method=npo"], tmp_path)
    assert outcome.error == (f"dataset muse_news: {root}/privleak/holdout-00000-of-00001.parquet: holds no rows; "
                             f"replace it with the published file") and outcome.trace is None
    assert not list(tmp_path.glob("cache/*"))  # no model was begun


def test_a_job_runs_on_wmdp_files(tmp_path):
    root = wmdp_folder(tmp_path / "wmdp")
    outcome = run(["experiment=wmdp", "dataset=wmdp", f"dataset.root={root}", "+method=rmu"], tmp_path)
    assert outcome.error is None and not outcome.failures
    accuracy = {(r["role"], r["split"]): r["value"] for r in outcome.records if r["metric"] == "mc_accuracy"}
    assert set(accuracy) == {(role, split) for role in ("original", "retrained", "unlearned")
                             for split in ("forget", "general")}
    assert all(value * len(QUESTIONS) == round(value * len(QUESTIONS)) for (_, split), value in accuracy.items()
               if split == "forget")
    assert outcome.dataset["files"]["questions"] == str(root / "wmdp-cyber" / "test-00000-of-00001.parquet")


def test_the_configs_compose_and_build_their_readers(tmp_path):
    for name, kind in (("muse_news", MuseFiles), ("muse_books", MuseFiles), ("wmdp", Wmdp)):
        dataset = OmegaConf.to_container(compose_config([f"dataset={name}", f"paths.data_dir={tmp_path}"]).dataset,
                                         resolve=True)
        assert isinstance(build(dataset, "dataset"), kind)
    books = compose_config(["dataset=muse_books", "paths.data_dir=/data"]).dataset
    assert books.repo == "muse-bench/MUSE-Books" and books.root is None and books.local == "/data/muse_books"


def test_a_muse_dataset_outside_its_scenario_is_refused_in_one_line(tmp_path):
    outcome = run(["experiment=tofu", "dataset=muse_fictitious", "+method=npo"], tmp_path)
    assert outcome.error == ("dataset muse_fictitious runs model=causal_lm in scenario=forget_corpus (not causal_lm in "
                             "forget_entities): use experiment=muse")


@pytest.mark.parametrize(("preset", "dataset"), [("muse_seeds", "muse_fictitious"), ("wmdp_seeds", "wmdp_fictitious")])
def test_the_seed_study_presets_sweep_nested_seeds_on_the_corpus_benchmarks(preset, dataset):
    config = compose_config([f"experiment={preset}", "seeds.train=2", "study.repeat=1"], return_hydra_config=True)
    assert (config.dataset.name, config.scenario.name, config.task.bench.rsplit(".", 1)[1]) == (
        dataset, "forget_corpus", "MuseBench" if dataset.startswith("muse") else "WmdpBench")
    assert dict(config.hydra.sweeper.params) == {"seeds.train": "range(5)", "study.repeat": "range(3)"}
    assert (config.seeds.unlearn, config.seeds.eval) == (7, 7)  # s_u = i·J + j


SAMPLING = ("evaluation.sampling.k=2", r"evaluation\.sampling\.k' option of dataset {} must be 0: its benchmark "
            r"generates no text to sample \(Leak@k is scored on TOFU-format and MUSE data\); got 2 instead$")
REFERENCE = ("evaluation.reference_numerics=true", r"evaluation\.reference_numerics' option of dataset {} must be "
             r"false: its task's metrics have no OpenUnlearning counterpart \(the text task's do\); got true instead$")
GRADNORM = ("evaluation.gradnorm=true", r"evaluation\.gradnorm' option of dataset {} must be false: its benchmark "
            r"runs no GradNorm attack \(the text task's, on TOFU-format data\); got true instead$")


@pytest.mark.parametrize(("overrides", "dataset", "option"), [
    (["experiment=wmdp", "+method=npo"], "wmdp_fictitious", SAMPLING),
    (["experiment=muse", "+method=npo"], "muse_fictitious", GRADNORM)])
def test_an_evaluation_option_is_refused_where_no_bench_honours_it(tmp_path, overrides, dataset, option):
    setting, message = option
    with pytest.raises(UserError, match="^the '" + message.format(dataset)):
        plan_job(with_paths([*overrides, setting], tmp_path), tmp_path)
    assert plan_job(with_paths(["experiment=muse", "+method=npo", "evaluation.sampling.k=2"], tmp_path),
                    tmp_path).config["evaluation"]["sampling"]["k"] == 2


@pytest.mark.parametrize("option", [SAMPLING[0], GRADNORM[0], REFERENCE[0]])
def test_the_text_tasks_evaluation_options_are_no_options_of_another_task(option):
    with pytest.raises(ConfigCompositionException, match=f"Could not override '{option.split('=')[0]}'"):
        compose_config(["+method=finetune", option])


@pytest.mark.parametrize("preset", ["experiment=tofu", "experiment=muse"])
def test_a_bad_nli_judge_is_refused_before_any_model_trains(tmp_path, preset):
    outcome = run([preset, "+method=npo", "evaluation.sampling.k=2", f"evaluation.sampling.nli={tmp_path / 'nli'}"],
                  tmp_path)
    error = outcome.error
    assert error.startswith("the 'evaluation.sampling.nli' option") and "(no such folder)" in error
    assert "\n" not in error
    assert not outcome.records and not (tmp_path / "cache").exists()
