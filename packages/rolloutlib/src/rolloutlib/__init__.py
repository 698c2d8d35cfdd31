"""Gymnasium-style environments and rollout primitives for agentic RL post-training."""
