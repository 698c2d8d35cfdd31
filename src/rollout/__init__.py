"""rollout: train language-model agents with asynchronous RL."""

__version__ = "0.1.0"
