"""unlearnbench's multiple-choice scoring (text/evaluate/multiple_choice.py, text/benchmarks/wmdp.py) against
lm-evaluation-harness 0.4.8 itself, the version OpenUnlearning pins: the same tiny Llama, saved to a folder with a BPE
tokenizer that puts "<s>" first when asked for its special tokens, scored on WMDP-format and MMLU-format parquet files
by lm-eval's `simple_evaluate` (its own `wmdp_cyber` and `mmlu_<subject>` task configs, included from the installed
package, with only the data source replaced by the local files) and by unlearnbench's evaluator, with `add_bos_token`
false (both tools' default) and true. Some prompts are longer than the model's positions, so lm-eval's cut from the left
counts too. Nothing is downloaded."""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from lightning_fabric import Fabric

from unlearnbench.tasks.text.benchmarks.wmdp import WmdpEvaluator
from unlearnbench.tasks.text.data.wmdp import mmlu_questions
from unlearnbench.tasks.text.data.wmdp_files import question_files, read_questions
from unlearnbench.tasks.text.evaluate.multiple_choice import HARNESS_VERSION, LETTERS, SUBJECTS, context

WORDS = ("port", "protocol", "cipher", "stream", "block", "key", "nonce", "replay", "packet", "header", "socket",
         "kernel", "buffer", "overflow", "shell", "exploit", "cell", "protein", "virus", "enzyme", "membrane", "nerve",
         "bone", "muscle", "tissue", "organ", "blood", "vessel")
MMLU_SUBJECTS = ("anatomy", "college_biology")
POSITIONS = 96  # the tiny model's max_position_embeddings: the longest prompts are cut from the left
WMDP_TASK, MMLU_GROUP = "wmdp_cyber_local", "mmlu_local"


def sentence(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high)))).capitalize()


def questions(rng: np.random.Generator, n: int, subject: str | None = None) -> list[dict]:
    """Rows as cais/wmdp and cais/mmlu hold them; every fourth question is long enough to be cut."""
    rows = []
    for i in range(n):
        question = sentence(rng, 40, 50) if i % 4 == 3 else sentence(rng, 4, 9) + "?"
        row = {"question": question, "choices": [sentence(rng, 1, 4) for _ in LETTERS],
               "answer": int(rng.integers(len(LETTERS)))}
        rows.append(row if subject is None else {**row, "subject": subject})
    return rows


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_data(root: Path) -> dict:
    """cais/wmdp's `wmdp-cyber/test-*.parquet` and cais/mmlu's `<subject>/{test,dev}-*.parquet`."""
    rng = np.random.default_rng(56)
    wmdp = write_parquet(root / "wmdp" / "wmdp-cyber" / "test-00000-of-00001.parquet", questions(rng, 8))
    mmlu = {}
    for subject in MMLU_SUBJECTS:
        test = write_parquet(root / "mmlu" / subject / "test-00000-of-00001.parquet", questions(rng, 6, subject))
        dev = write_parquet(root / "mmlu" / subject / "dev-00000-of-00001.parquet", questions(rng, 2, subject))
        mmlu[subject] = {"test": str(test), "dev": str(dev)}
    return {"wmdp": {"test": str(wmdp)}, "mmlu": mmlu, "wmdp_root": root / "wmdp", "mmlu_root": root / "mmlu"}


def write_model(folder: Path, texts: list[str]) -> None:
    """A byte-level BPE tokenizer whose post-processor puts "<s>" first (as Llama's does), and a tiny Llama."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=list(special.values()),
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = bpe.token_to_id("<s>")
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[
        ("<s>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, **special)
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=POSITIONS,
                         initializer_range=0.2, tie_word_embeddings=False, bos_token_id=bos,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(56)
    LlamaForCausalLM(config).save_pretrained(folder)


def write_tasks(folder: Path, data: dict, cache: Path) -> None:
    """lm-eval's own `wmdp_cyber` and `mmlu_<subject>` configs from the installed package (its prompt, choices,
    description, metric), the data read from the local parquet files instead of the hub; and a group of the MMLU
    subjects aggregated as lm-eval's `mmlu` group aggregates them (the mean weighted by size)."""
    import lm_eval

    tasks = Path(lm_eval.__file__).parent / "tasks"

    def local(name: str, include: Path, files: dict) -> dict:
        return {"include": str(include), "task": name, "dataset_path": "parquet", "dataset_name": None,
                "dataset_kwargs": {"data_files": files, "cache_dir": str(cache)}}

    configs = [local(WMDP_TASK, tasks / "wmdp" / "wmdp_cyber.yaml", data["wmdp"])]
    configs += [{**local(f"{MMLU_GROUP}_{subject}", tasks / "mmlu" / "default" / f"mmlu_{subject}.yaml",
                         data["mmlu"][subject]), "tag": f"{MMLU_GROUP}_tasks"} for subject in MMLU_SUBJECTS]
    for config in configs:
        (folder / f"{config['task']}.yaml").write_text(yaml.safe_dump(config))
    group = {"group": MMLU_GROUP, "task": [f"{MMLU_GROUP}_tasks"],
             "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}]}
    (folder / f"_{MMLU_GROUP}.yaml").write_text(yaml.safe_dump(group))


def import_lm_eval():
    """lm_eval 0.4.8 names `transformers.AutoModelForVision2Seq` (for its multimodal model, which these tests never
    use) at import; transformers 5 renamed that class AutoModelForImageTextToText. The alias lets 0.4.8 import."""
    import transformers.models.auto  # transformers swaps its lazy module while these import; alias the final one
    import transformers.processing_utils  # noqa: F401

    module = sys.modules["transformers"]
    if not hasattr(module, "AutoModelForVision2Seq"):
        module.AutoModelForVision2Seq = module.AutoModelForImageTextToText
    import lm_eval

    installed = importlib.metadata.version("lm_eval")
    assert installed == HARNESS_VERSION, f"lm-eval {installed} is installed; these tests match {HARNESS_VERSION}"
    return lm_eval


def harness_scores(folder: Path, tasks: Path, add_bos_token: bool) -> dict:
    """lm-eval's acc and per-question letter log-likelihoods (log_samples), per task."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    bos = ",add_bos_token=True" if add_bos_token else ""  # else HFLM's default, as OpenUnlearning runs it
    results = simple_evaluate(
        model="hf", model_args=f"pretrained={folder},dtype=float32{bos}",
        tasks=[WMDP_TASK, MMLU_GROUP], device="cpu", batch_size=8, log_samples=True, bootstrap_iters=0,
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False))
    subjects = [f"{MMLU_GROUP}_{subject}" for subject in MMLU_SUBJECTS]
    likelihoods = {}
    for split, names in (("forget", [WMDP_TASK]), ("general", subjects)):
        samples = [s for name in names for s in sorted(results["samples"][name], key=lambda s: s["doc_id"])]
        likelihoods[split] = np.array([[ll for ll, _ in s["filtered_resps"]] for s in samples])
    return {"acc": {"forget": results["results"][WMDP_TASK]["acc,none"],
                    "general": results["results"][MMLU_GROUP]["acc,none"]},
            "likelihoods": likelihoods}


def unlearnbench_scores(folder: Path, data: dict, add_bos_token: bool) -> dict:
    """The evaluator of a WMDP job on the same files, read by the job's own readers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    hazard = [{**q, "subject": SUBJECTS["cyber"]} for q in read_questions(question_files(data["wmdp_root"], "cyber"))]
    probes = {"forget": hazard, "general": mmlu_questions(data["mmlu_root"])}
    evaluator = WmdpEvaluator(Fabric(accelerator="cpu", devices=1), tokenizer, SimpleNamespace(probes=probes),
                              batch_size=6, add_bos_token=add_bos_token)
    outputs = evaluator.outputs(model)
    contexts = [context(q["question"], q["choices"], q["subject"]) for q in hazard]
    encoder = evaluator.encoder(model)
    return {"acc": {split: value for (_, split), value in evaluator.values(outputs, {}).items()},
            "likelihoods": outputs, "tokenizer": tokenizer, "encoder": encoder, "contexts": evaluator.contexts,
            "longest": max(len(encoder.encode(text)) for text in contexts)}


@contextlib.contextmanager
def global_random_state_kept():
    """simple_evaluate seeds Python's, numpy's and torch's global generators; the rest of the suite gets them back."""
    python, legacy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(python)
    np.random.set_state(legacy)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval")
    with pytest.MonkeyPatch.context() as patch, global_random_state_kept():  # env before lm_eval imports datasets
        for name, value in (("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1"),
                            ("HF_DATASETS_CACHE", str(root / "datasets")), ("HF_HOME", str(root / "hf"))):
            patch.setenv(name, value)
        import huggingface_hub.constants  # already imported by transformers, so its offline switch is set here

        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        lm_eval = import_lm_eval()
        # what simple_evaluate records of the machine (git, pip and nvidia-smi run as processes), nothing it scores
        patch.setattr(lm_eval.evaluator, "add_env_info", lambda results: None)
        patch.setattr(lm_eval.evaluator, "get_git_commit_hash", lambda: None)
        data = write_data(root / "data")
        texts = [context(q["question"], q["choices"], q.get("subject", "cybersecurity"))
                 for q in read_questions(question_files(data["wmdp_root"], "cyber")) + mmlu_questions(
                     data["mmlu_root"])]
        write_model(root / "model", [*texts, *(" " + letter for letter in LETTERS)])
        (root / "tasks").mkdir()
        write_tasks(root / "tasks", data, root / "datasets")
        scores = {bos: {"harness": harness_scores(root / "model", root / "tasks", bos),
                        "unlearnbench": unlearnbench_scores(root / "model", data, bos)} for bos in (False, True)}
    print("\nlm-eval acc", {f"add_bos_token={bos}": side["harness"]["acc"] for bos, side in scores.items()})
    return scores


def test_the_tokenizer_puts_a_bos_first_only_when_asked_for_its_special_tokens(scored):
    tokenizer = scored[True]["unlearnbench"]["tokenizer"]
    with_special, without = tokenizer.encode("Answer: A"), tokenizer.encode("Answer: A", add_special_tokens=False)
    assert with_special == [tokenizer.bos_token_id, *without] and tokenizer.bos_token_id not in without
    assert scored[True]["unlearnbench"]["encoder"].encode("Answer:")[0] == tokenizer.bos_token_id
    assert tokenizer.bos_token_id not in scored[False]["unlearnbench"]["encoder"].encode("Answer:")


def test_some_prompts_are_longer_than_the_model_so_the_cut_from_the_left_is_checked_too(scored):
    for bos in (False, True):
        assert scored[bos]["unlearnbench"]["encoder"].max_length == POSITIONS
        assert scored[bos]["unlearnbench"]["longest"] > POSITIONS + 1


@pytest.mark.parametrize("add_bos_token", [False, True])
def test_accuracies_and_every_prediction_equal_lm_evals(scored, add_bos_token):
    harness, ours = scored[add_bos_token]["harness"], scored[add_bos_token]["unlearnbench"]
    for split in ("forget", "general"):
        assert ours["likelihoods"][split].shape == harness["likelihoods"][split].shape
        assert np.argmax(ours["likelihoods"][split], 1).tolist() == np.argmax(harness["likelihoods"][split],
                                                                               1).tolist()
        assert ours["likelihoods"][split] == pytest.approx(harness["likelihoods"][split], rel=1e-5, abs=1e-4)
        assert ours["acc"][split] == pytest.approx(harness["acc"][split], abs=1e-12)


def test_a_bos_changes_every_log_likelihood_on_both_sides_but_where_the_cut_drops_it(scored):
    plain = scored[False]["unlearnbench"]
    for split, contexts in plain["contexts"].items():
        lengths = np.array([[sum(map(len, plain["encoder"].pair(text, " " + letter))) for letter in LETTERS]
                            for text in contexts])
        cut = lengths >= POSITIONS + 1  # cut with and without BOS to the same last ids
        assert cut.any() and not cut.all()
        for side in ("harness", "unlearnbench"):
            difference = np.abs(scored[True][side]["likelihoods"][split] - scored[False][side]["likelihoods"][split])
            assert difference[~cut].min() > 1e-4 and difference[cut].max() < 1e-5, (side, split)  # float32: ~1e-6


def test_lm_evals_default_is_no_bos_as_unlearnbenchs_is(scored):
    from lm_eval.models.huggingface import HFLM

    from unlearnbench.tasks.text.options import TextEvaluation

    assert inspect.signature(HFLM.__init__).parameters["add_bos_token"].default is False
    assert TextEvaluation().add_bos_token is False
