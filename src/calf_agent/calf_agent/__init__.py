"""Policies, PPO training, checkpoints and the policy node."""
