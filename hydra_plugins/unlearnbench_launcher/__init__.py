"""unlearnbench's Hydra plugins: the launchers `hydra/launcher=local` (local.py: several jobs at once on one machine,
over joblib's process pool) and `hydra/launcher=slurm` (slurm.py: submitit's SLURM job array), and the sweeper
`hydra/sweeper=tune` (tune.py: `experiment=tune`, Optuna's trials as batches of jobs); and the callback that has
every sweep compose each job's config once (composing.py). Each module imports its engine alone, so that the
`slurm` extra is needed only for SLURM."""
