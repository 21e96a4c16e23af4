"""Post-training loops that sample from the model they train: GRPO (grpo.py) samples G
completions per prompt with the zoo's cached sampler (zoo/infer/generate.py) on the training
mesh, scores them with the configured reward (rewards.py), builds the rows the objective's
loss reads (rows.py) and updates with the family-free train step (zoo/train/step.py)."""
