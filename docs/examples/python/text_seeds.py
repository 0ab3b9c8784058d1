"""The text task over three training seeds from Python: `experiment=tofu` (the built-in TOFU-format data, a tiny
Llama fine-tuned from scratch) with seeds.train=range(3) and five of its methods (drop `methods=…` for all of them);
about half a minute on two CPU cores."""

from unlearnbench import load_report, run_sweep

records = run_sweep(["experiment=tofu", "seeds.train=range(3)", "methods=[grad_ascent,npo,simnpo,altpo,text_retrain]"],
                    sweep_dir="runs/text_seeds", quiet=True)

# Forget quality (the KS p-value of the forget truth ratios against M_r's) and model utility, per training seed.
scores = records.query("metric in ['forget_quality', 'model_utility'] and role != 'retrained'").fillna(
    {"method": "(original)"})
print(scores.pivot_table(index=["metric", "method"], columns="seed_train", values="value").round(3))

# The report is the image task's: here, forget quality's mean and spread over the three training seeds.
report = load_report("runs/text_seeds")
quality = report.summary.query("metric == 'forget_quality' and role == 'unlearned'")
print(quality[["method", "mean", "std", "n"]].round(3).to_string(index=False))
