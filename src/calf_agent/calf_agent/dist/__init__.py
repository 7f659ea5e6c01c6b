"""Distributed training: a learner node and rollout worker nodes that exchange sealed batches and weights over DDS."""
