"""Rebuild this folder: OpenUnlearning's evaluation run folders, as its `src/eval.py` leaves them.

    python tests/data/openunlearning/build.py OPEN_UNLEARNING_CHECKOUT

1. Hydra's own files. For each run of `RUNS`, the checkout's `src/eval.py` entry point (its `@hydra.main` line, with
   a body that does nothing) is run with the overrides of OpenUnlearning's scripts (scripts/tofu_finetune.sh,
   tofu_unlearn.sh, muse_unlearn.sh; docs/evaluation.md), so Hydra composes the checkout's configs (configs/eval.yaml,
   configs/experiment/eval/{tofu,muse,wmdp}/default.yaml) and saves `.hydra/config.yaml` (unresolved: `forget_split:
   ${forget_split}` …), `overrides.yaml` and `hydra.yaml` into the run's `paths.output_dir`, which this script copies
   here. OpenUnlearning pins `hydra_colorlog`, whose two logging configs are written into the checkout first (the
   plugin's files); they change nothing but hydra.yaml's logging section.
2. The evaluation files: a few examples per metric in the shapes OpenUnlearning writes (src/evals/base.py: keys
   sorted, `json.dump(indent=4)`; the metric handlers' `value_by_index` entries; src/evals/lm_eval.py for
   `LMEval_EVAL.json`, `{task: lm-eval's samples}`, and `LMEval_SUMMARY.json`, `{task/metric: value}`), with
   numbers drawn from one seeded generator. Their values are made up; their layout is OpenUnlearning's at d3d7cf9.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
TOFU_MODEL = "Llama-3.2-1B-Instruct"
MUSE_MODEL = "Llama-2-7b-hf"
WMDP_MODEL = "zephyr-7b-beta"
SPLITS = {"forget01": ("holdout01", "retain99"), "forget05": ("holdout05", "retain95"),
          "forget10": ("holdout10", "retain90")}

# (the run's folder under this one, the overrides of its `python src/eval.py` command, what its files hold)
RUNS = [
    *[(f"saves/eval/tofu_{TOFU_MODEL}_full/evals_{forget}",
       ["experiment=eval/tofu/default.yaml", f"forget_split={forget}", f"holdout_split={holdout}",
        f"task_name=tofu_{TOFU_MODEL}_full_{forget}", f"model={TOFU_MODEL}",
        f"model.model_args.pretrained_model_name_or_path=saves/finetune/tofu_{TOFU_MODEL}_full",
        f"retain_logs_path=saves/eval/tofu_{TOFU_MODEL}_{retain}/TOFU_EVAL.json",
        f"paths.output_dir=saves/eval/tofu_{TOFU_MODEL}_full/evals_{forget}"], ("TOFU", forget, 0.0))
      for forget, (holdout, retain) in SPLITS.items()],
    (f"saves/eval/tofu_{TOFU_MODEL}_retain90",
     ["experiment=eval/tofu/default.yaml", "forget_split=forget10", "holdout_split=holdout10",
      f"task_name=tofu_{TOFU_MODEL}_retain90", f"model={TOFU_MODEL}",
      f"model.model_args.pretrained_model_name_or_path=saves/finetune/tofu_{TOFU_MODEL}_retain90"],
     ("TOFU", "forget10", 1.0)),
    (f"saves/unlearn/tofu_{TOFU_MODEL}_forget10_NPO/evals",
     ["experiment=eval/tofu/default.yaml", "forget_split=forget10", "holdout_split=holdout10", f"model={TOFU_MODEL}",
      f"task_name=tofu_{TOFU_MODEL}_forget10_NPO",
      f"model.model_args.pretrained_model_name_or_path=saves/unlearn/tofu_{TOFU_MODEL}_forget10_NPO",
      f"paths.output_dir=saves/unlearn/tofu_{TOFU_MODEL}_forget10_NPO/evals",
      f"retain_logs_path=saves/eval/tofu_{TOFU_MODEL}_retain90/TOFU_EVAL.json"], ("TOFU", "forget10", 0.7)),
    *[(f"saves/eval/muse_{MUSE_MODEL}_{split}_target",
       ["experiment=eval/muse/default.yaml", f"data_split={split}", f"task_name=muse_{MUSE_MODEL}_{split}_target",
        f"model={MUSE_MODEL}"], ("MUSE", split, 0.0)) for split in ("News", "Books")],
    (f"saves/eval/muse_{MUSE_MODEL}_News_retrain",
     ["experiment=eval/muse/default.yaml", "data_split=News", f"task_name=muse_{MUSE_MODEL}_News_retrain",
      f"model={MUSE_MODEL}", "model.model_args.pretrained_model_name_or_path=muse-bench/MUSE-News_retrain"],
     ("MUSE", "News", 1.0)),
    (f"saves/eval/wmdp_{WMDP_MODEL}_target",
     ["experiment=eval/wmdp/default.yaml", f"task_name=wmdp_{WMDP_MODEL}_target"], ("WMDP", "cyber", 0.0)),
    (f"saves/unlearn/wmdp_{WMDP_MODEL}_RMU/evals",
     ["experiment=eval/wmdp/default.yaml", "data_split=cyber", f"task_name=wmdp_{WMDP_MODEL}_RMU",
      f"model.model_args.pretrained_model_name_or_path=saves/unlearn/wmdp_{WMDP_MODEL}_RMU",
      f"paths.output_dir=saves/unlearn/wmdp_{WMDP_MODEL}_RMU/evals"], ("WMDP", "cyber", 0.8)),
]

EVAL_ENTRY = '''import hydra


@hydra.main(version_base=None, config_path="../configs", config_name="eval.yaml")
def main(cfg):
    """OpenUnlearning's src/eval.py entry point, without the evaluation: Hydra saves the run's .hydra/ alone."""


if __name__ == "__main__":
    main()
'''

# hydra_colorlog 1.2.0's configs (facebookresearch/hydra, plugins/hydra_colorlog/hydra_plugins/hydra_colorlog/conf)
COLORLOG = {
    "job_logging": """version: 1
formatters:
  simple:
    format: '[%(asctime)s][%(name)s][%(levelname)s] - %(message)s'
  colorlog:
    '()': 'colorlog.ColoredFormatter'
    format: 'COLORED_FORMAT'
    log_colors:
      DEBUG: purple
      INFO: green
      WARNING: yellow
      ERROR: red
      CRITICAL: red
handlers:
  console:
    class: logging.StreamHandler
    formatter: colorlog
    stream: ext://sys.stdout
  file:
    class: logging.FileHandler
    formatter: simple
    filename: ${hydra.job.name}.log
root:
  level: INFO
  handlers: [console, file]
disable_existing_loggers: false
""".replace("COLORED_FORMAT", "[%(cyan)s%(asctime)s%(reset)s][%(blue)s%(name)s%(reset)s]"
                                "[%(log_color)s%(levelname)s%(reset)s] - %(message)s"),
    "hydra_logging": """version: 1
formatters:
  colorlog:
    '()': 'colorlog.ColoredFormatter'
    format: "[%(cyan)s%(asctime)s%(reset)s][%(purple)sHYDRA%(reset)s] %(message)s"
handlers:
  console:
    class: logging.StreamHandler
    formatter: colorlog
    stream: ext://sys.stdout
root:
  level: INFO
  handlers: [console]
disable_existing_loggers: false
"""}


def stand_in(checkout: Path) -> Path:
    """A copy of the checkout's configs/ beside the stand-in src/eval.py and the colorlog configs, in a fixed
    folder (its path is the runs' `hydra.runtime.cwd`); the checkout itself is left as it is."""
    root = Path(tempfile.gettempdir()) / "open-unlearning"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(checkout / "configs", root / "configs")
    for group, text in COLORLOG.items():
        (root / "configs" / "hydra" / group).mkdir(parents=True, exist_ok=True)
        (root / "configs" / "hydra" / group / "colorlog.yaml").write_text(text)
    (root / "src").mkdir()
    (root / "src" / "eval.py").write_text(EVAL_ENTRY)
    return root


def hydra_files(root: Path, folder: str, overrides: list[str]) -> None:
    """Run the stand-in src/eval.py in `root` and copy the `.hydra/` Hydra saved into `folder` here."""
    subprocess.run([sys.executable, "src/eval.py", *overrides], cwd=root, check=True, capture_output=True)
    target = HERE / folder / ".hydra"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / folder / ".hydra", target)


def dump(path: Path, logs: dict) -> None:
    """As OpenUnlearning's `Evaluator.save_logs`: keys sorted, indent 4."""
    path.write_text(json.dumps(dict(sorted(logs.items())), indent=4))


def by_index(entries: list) -> dict:
    return {str(i): entry for i, entry in enumerate(entries)}


def probability(rng: np.random.Generator, n: int, loss: float, options: int = 0) -> dict:
    """`probability`: per index {prob, avg_loss}; lists of `options` values for the perturbed answers."""
    def one():
        losses = np.abs(rng.normal(loss, 0.3, options or 1)).round(6)
        values = [{"prob": float(np.exp(-v)), "avg_loss": float(v)} for v in losses]
        return values[0] if not options else {"prob": [v["prob"] for v in values],
                                              "avg_loss": [v["avg_loss"] for v in values]}
    entries = [one() for _ in range(n)]
    return {"agg_value": float(np.mean([np.mean(e["prob"]) for e in entries])), "value_by_index": by_index(entries)}


def rouge(rng: np.random.Generator, n: int, level: float) -> dict:
    values = np.clip(rng.normal(level, 0.15, n), 0, 1).round(6)
    entries = [{"rouge1_recall": float(v), "rougeL_f1": float(v), "rougeL_recall": float(v), "input": "Question?",
                "ground_truth": "An answer.", "generation": "A generation."} for v in values]
    return {"agg_value": float(values.mean()), "value_by_index": by_index(entries)}


def truth_ratio(correct: dict, wrong: dict, aggregator: str) -> dict:
    """memorization.py's `truth_ratio`: wrong / (correct + 1e-10) on exp(−mean loss)."""
    rights = np.array([np.exp(-np.mean(e["avg_loss"])) for e in correct["value_by_index"].values()])
    wrongs = np.array([np.exp(-np.mean(e["avg_loss"])) for e in wrong["value_by_index"].values()])
    ratios = wrongs / (rights + 1e-10)
    agg = (np.mean(np.minimum(ratios, 1 / (ratios + 1e-10))) if aggregator == "closer_to_1_better"
           else np.mean(np.maximum(0, 1 - ratios)))
    return {"agg_value": float(agg), "value_by_index": by_index([{"score": float(r)} for r in ratios])}


def normalised(correct: dict, wrong: dict) -> dict:
    """`probability_w_options`: the true answer's share of the options' probabilities."""
    rights = np.array([e["prob"] for e in correct["value_by_index"].values()])
    wrongs = np.array([np.sum(e["prob"]) for e in wrong["value_by_index"].values()])
    shares = rights / (rights + wrongs + 1e-10)
    return {"agg_value": float(shares.mean()), "value_by_index": by_index([{"prob": float(p)} for p in shares])}


def attack(rng: np.random.Generator, n: int, shift: float) -> dict:
    """An MIA attack's entry: scores of the forget members and holdout non-members, and their AUC."""
    from sklearn.metrics import roc_auc_score

    members, others = rng.normal(1.0 + shift, 0.5, n).round(6), rng.normal(2.0, 0.5, n).round(6)
    auc = float(roc_auc_score([0] * n + [1] * n, [*members, *others]))
    return {"agg_value": auc, "auc": auc,
            **{part: {"agg_value": float(scores.mean()), "value_by_index": by_index([{"score": float(s)}
                                                                                      for s in scores])}
               for part, scores in (("forget", members), ("holdout", others))}}


def tofu_logs(rng: np.random.Generator, forget: str, retrained: float) -> dict:
    """TOFU_EVAL.json of configs/eval/tofu.yaml's default metrics and their pre_compute entries."""
    n = {"forget01": 4, "forget05": 6, "forget10": 8}[forget]
    logs = {"forget_Q_A_Prob": probability(rng, n, 0.3 + 2 * retrained),
            "forget_Q_A_ROUGE": rouge(rng, n, 0.9 - 0.5 * retrained),
            "forget_Q_A_PARA_Prob": probability(rng, n, 0.8 + retrained),
            "forget_Q_A_PERT_Prob": probability(rng, n, 1.6, options=5),
            "extraction_strength": {"value_by_index": by_index([{"score": float(s)} for s in
                                                                rng.uniform(0, 1 - 0.8 * retrained, n).round(6)])},
            "mia_min_k": attack(rng, n, -0.8 * (1 - retrained))}
    logs["extraction_strength"]["agg_value"] = float(np.mean(
        [e["score"] for e in logs["extraction_strength"]["value_by_index"].values()]))
    logs["forget_truth_ratio"] = truth_ratio(logs["forget_Q_A_PARA_Prob"], logs["forget_Q_A_PERT_Prob"],
                                             "closer_to_1_better")
    for prefix in ("retain", "ra", "wf"):
        logs[f"{prefix}_Q_A_Prob"] = probability(rng, 5, 0.4)
        logs[f"{prefix}_Q_A_PERT_Prob"] = probability(rng, 5, 1.5, options=5 if prefix == "retain" else 4)
        logs[f"{prefix}_Q_A_ROUGE"] = rouge(rng, 5, 0.8)
        if prefix == "retain":
            logs["retain_Q_A_PARA_Prob"] = probability(rng, 5, 0.7)
            logs["retain_Truth_Ratio"] = truth_ratio(logs["retain_Q_A_PARA_Prob"], logs["retain_Q_A_PERT_Prob"],
                                                     "true_better")
        else:
            logs[f"{prefix}_Q_A_Prob_normalised"] = normalised(logs[f"{prefix}_Q_A_Prob"],
                                                               logs[f"{prefix}_Q_A_PERT_Prob"])
            logs[f"{prefix}_Truth_Ratio"] = truth_ratio(logs[f"{prefix}_Q_A_Prob"], logs[f"{prefix}_Q_A_PERT_Prob"],
                                                        "true_better")
    parts = ["retain_Q_A_Prob", "retain_Q_A_ROUGE", "retain_Truth_Ratio",
             *(f"{p}_{m}" for p in ("ra", "wf") for m in ("Q_A_Prob_normalised", "Q_A_ROUGE", "Truth_Ratio"))]
    logs["model_utility"] = {"agg_value": float(len(parts) / sum(1 / logs[k]["agg_value"] for k in parts))}
    logs["forget_quality"] = {"agg_value": None}  # ks_test without its retain logs (privacy.py)
    logs["privleak"] = {"agg_value": ((1 - logs["mia_min_k"]["agg_value"]) - 0.5) / (0.5 + 1e-10) * 100}
    return logs


def muse_logs(rng: np.random.Generator, retrained: float) -> dict:
    """MUSE_EVAL.json of configs/eval/muse.yaml's default metrics."""
    logs = {"forget_knowmem_ROUGE": rouge(rng, 5, 0.6 - 0.3 * retrained),
            "retain_knowmem_ROUGE": rouge(rng, 5, 0.55),
            "forget_verbmem_ROUGE": rouge(rng, 4, 0.7 - 0.5 * retrained),
            "mia_min_k": attack(rng, 6, -0.9 * (1 - retrained)),
            "extraction_strength": {"value_by_index": by_index([{"score": float(s)} for s in
                                                                rng.uniform(0, 1, 4).round(6)])}}
    logs["extraction_strength"]["agg_value"] = float(np.mean(
        [e["score"] for e in logs["extraction_strength"]["value_by_index"].values()]))
    logs["privleak"] = {"agg_value": ((1 - logs["mia_min_k"]["agg_value"]) - 0.5) / (0.5 + 1e-10) * 100}
    return logs


def lm_eval_sample(doc_id: int, correct: bool, subject: str) -> dict:
    """One of lm-eval 0.4.8's logged samples of a multiple-choice task (evaluator.py): the per-sample `acc`."""
    choices = ["A", "B", "C", "D"]
    context = f"The following are multiple choice questions (with answers) about {subject}.\n\nQ{doc_id}?\nAnswer:"
    return {"doc_id": doc_id, "doc": {"question": f"Q{doc_id}?", "choices": choices, "answer": 0},
            "target": 0, "arguments": {f"gen_args_{i}": {"arg_0": context, "arg_1": f" {c}"}
                                       for i, c in enumerate(choices)},
            "resps": [[[-1.0 - i, False]] for i in range(4)], "filtered_resps": [[-1.0 - i, False] for i in range(4)],
            "filter": "none", "metrics": ["acc"], "doc_hash": "0" * 64, "prompt_hash": "1" * 64,
            "target_hash": "2" * 64, "acc": 1.0 if correct else 0.0}


def lm_eval_logs(rng: np.random.Generator, subset: str, unlearned: float) -> tuple[dict, dict]:
    """(LMEval_EVAL.json, LMEval_SUMMARY.json) of configs/experiment/eval/wmdp/default.yaml's tasks: wmdp_<subset>
    (a task) and mmlu (a group: its samples per subtask, its summary the size-weighted mean, lm-eval's mmlu.yaml)."""
    hazard = rng.random(10) < 0.55 - 0.3 * unlearned
    subtasks = {"mmlu_abstract_algebra": rng.random(4) < 0.55, "mmlu_college_biology": rng.random(6) < 0.6}
    logs = {f"wmdp_{subset}": {f"wmdp_{subset}": [lm_eval_sample(i, c, "computer security")
                                                   for i, c in enumerate(hazard)]},
            "mmlu": {name: [lm_eval_sample(i, c, name[5:].replace("_", " ")) for i, c in enumerate(correct)]
                     for name, correct in subtasks.items()}}
    pooled = np.concatenate(list(subtasks.values()))

    def stderr(values: np.ndarray) -> float:
        return float(math.sqrt(np.var(values, ddof=1) / len(values)))

    summary = {f"wmdp_{subset}/acc": float(hazard.mean()), f"wmdp_{subset}/acc_stderr": stderr(hazard),
               "mmlu/acc": float(pooled.mean()), "mmlu/acc_stderr": stderr(pooled)}
    return logs, summary


def eval_files(folder: Path, kind: tuple, rng: np.random.Generator) -> None:
    benchmark, split, level = kind
    if benchmark == "TOFU":
        logs = tofu_logs(rng, split, level)
    elif benchmark == "MUSE":
        logs = muse_logs(rng, level)
    else:
        logs, summary = lm_eval_logs(rng, split, level)
        dump(folder / "LMEval_EVAL.json", logs)
        dump(folder / "LMEval_SUMMARY.json", summary)
        return
    dump(folder / f"{benchmark}_EVAL.json", logs)
    dump(folder / f"{benchmark}_SUMMARY.json", {k: v["agg_value"] for k, v in logs.items()
                                                if v.get("agg_value") is not None})


def main(checkout: Path) -> None:
    rng = np.random.default_rng(20250301)
    root = stand_in(checkout)
    for folder, overrides, kind in RUNS:
        hydra_files(root, folder, overrides)
        eval_files(HERE / folder, kind, rng)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
