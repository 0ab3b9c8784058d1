"""unlearnbench's Hydra launchers: `hydra/launcher=local` (local.py: several jobs at once on one machine, over
joblib's process pool) and `hydra/launcher=slurm` (slurm.py: submitit's SLURM job array). Each module imports its
engine alone, so that the `slurm` extra is needed only for SLURM."""
