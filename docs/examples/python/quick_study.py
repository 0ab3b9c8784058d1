"""A small seed study from Python, sized for a notebook: SSD and fine-tuning on digits, three training seeds with
two unlearning seeds each (6 jobs, each running both methods on its M_o and M_r; under a minute on two CPU cores)."""

from unlearnbench import load_report, run_sweep

records = run_sweep(["experiment=seed_sensitivity", "study.I=3", "study.J=2", "methods=[ssd,finetune]",
                     "hydra/launcher=local"], sweep_dir="runs/quick_study", quiet=True)

# Forget-class test accuracy of the unlearned models: mean and spread over each training seed's unlearning seeds.
forget = records.query("role == 'unlearned' and metric == 'acc' and split == 'forget_test'")
print(forget.groupby(["method", "seed_train"])["value"].agg(["mean", "std"]).round(3))

# The report splits each metric's variance into the training seed's (sigma_t2) and the unlearning seed's (sigma_u2).
report = load_report("runs/quick_study")
variance = report.seed_variance.query("role == 'unlearned' and metric == 'acc' and split == 'forget_test'")
print(variance[["method", "sigma_t2", "sigma_u2", "icc"]].round(4).to_string(index=False))
print(f"{len(report.figures)} figures in {report.folder / 'figures'}")
