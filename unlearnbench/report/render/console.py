"""The table a job prints: the main metrics per method, one section per target (no torch needed).

Columns without a value in the job (e.g. accuracies in the ranking task) are left out; a metric recorded per round
shows its last round.
"""

from __future__ import annotations

from unlearnbench.report.read.collect import describe_numerics

# (header, metric, split): the main metrics, in this order, of a job's table and of the report's short tables and
# seed-variance and W2 sections; each shows the columns its records have.
MAIN = [
    ("acc D'_f", "acc", "forget_test"),
    ("acc D'_r", "acc", "retain_test"),
    ("Δacc D'_f", "delta_acc", "forget_test"),
    ("Δacc D'_r", "delta_acc", "retain_test"),
    ("Δacc D_f", "delta_acc", "forget_train"),
    ("MIA", "mia", "forget_train"),
    ("ΔMIA", "delta_mia", "forget_train"),
    ("act.dist D_f", "activation_distance", "forget_train"),
    ("JS D_f", "js_divergence", "forget_train"),
    ("layer dist", "layer_distance", ""),
    ("tow", "tow", ""),
    ("NDCG@10", "ndcg@10", ""),
    ("online NDCG", "online_ndcg", ""),
    ("‖w_T − w‖", "weight_distance", ""),
    ("FQ", "forget_quality", "forget"),  # the text task
    ("FQ first M_r", "forget_quality_first", "forget"),  # (the report's: against one fixed M_r)
    ("MU", "model_utility", ""),
    ("prob D_f", "prob", "forget"),
    ("ROUGE D_f", "rouge_l_recall", "forget"),
    ("TR D_f", "truth_ratio", "forget"),
    ("MinK AUC", "mia_min_k_auc", "forget"),
    ("privleak", "privleak", "forget"),
    ("time s", "time_s", ""),
]


def row_name(record: dict) -> str:
    return record["method"] if record["role"] == "unlearned" else f"({record['role']})"


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def table_rows(records: list[dict]) -> dict[str, dict]:
    """Row name → {(metric, split): value}, keeping the value of the latest round of per-round metrics."""
    values: dict[str, dict] = {}
    latest: dict[tuple, int] = {}
    for r in records:
        key, round_ = (row_name(r), r["metric"], r["split"] or ""), r.get("round")
        if round_ is None or round_ >= latest.get(key, -1):
            values.setdefault(key[0], {})[key[1:]] = r["value"]
            latest[key] = -1 if round_ is None else round_
    return values


def job_table(result: dict) -> str:
    """Plain-text table per target: rows original, retrained, then every method."""
    job = result["job"]
    lines = [f"{job['dataset']} · {job['model']} · {job['scenario']} · seeds train {job['seed_train']} "
             f"unlearn {job['seed_unlearn']} eval {job['seed_eval']}",
             f"on {describe_numerics(result.get('numerics'))}"]
    for target in dict.fromkeys(r["target"] for r in result["records"]):
        values = table_rows([r for r in result["records"] if r["target"] == target])
        columns = [c for c in MAIN if any(v.get(c[1:]) is not None for v in values.values())]
        header = ["target " + target, *(c[0] for c in columns)]
        rows = [[name, *(fmt(v.get((metric, split))) for _, metric, split in columns)] for name, v in values.items()]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
        lines.append("")
        for i, row in enumerate([header, *rows]):
            lines.append("  ".join(str(x).rjust(w) if j else str(x).ljust(w) for j, (x, w) in
                                   enumerate(zip(row, widths, strict=True))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
