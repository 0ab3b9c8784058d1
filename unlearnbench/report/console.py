"""The table a job prints: the main metrics per method, one section per target (no torch needed)."""

from __future__ import annotations

COLUMNS = [  # (header, metric, split)
    ("acc D'_f", "acc", "forget_test"),
    ("acc D'_r", "acc", "retain_test"),
    ("Δacc D_f", "delta_acc", "forget_train"),
    ("Δacc D'_r", "delta_acc", "retain_test"),
    ("MIA", "mia", "forget_train"),
    ("ΔMIA", "delta_mia", "forget_train"),
    ("act.dist D_f", "activation_distance", "forget_train"),
    ("JS D_f", "js_divergence", "forget_train"),
    ("layer dist", "layer_distance", None),
    ("time s", "time_s", None),
]


def row_name(record: dict) -> str:
    return record["method"] if record["role"] == "unlearned" else f"({record['role']})"


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def job_table(result: dict) -> str:
    """Plain-text table per target: rows original, retrained, then every method."""
    job = result["job"]
    lines = [f"{job['dataset']} · {job['model']} · {job['scenario']} · seeds train {job['seed_train']} "
             f"unlearn {job['seed_unlearn']} eval {job['seed_eval']}"]
    targets = list(dict.fromkeys(r["target"] for r in result["records"]))
    for target in targets:
        values: dict[str, dict] = {}
        for r in result["records"]:
            if r["target"] == target:
                values.setdefault(row_name(r), {})[r["metric"], r["split"]] = r["value"]
        header = ["target " + target, *(c[0] for c in COLUMNS)]
        rows = [[name, *(fmt(v.get((metric, split))) for _, metric, split in COLUMNS)] for name, v in values.items()]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
        lines.append("")
        for i, row in enumerate([header, *rows]):
            lines.append("  ".join(str(x).rjust(w) if j else str(x).ljust(w) for j, (x, w) in
                                   enumerate(zip(row, widths, strict=True))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
