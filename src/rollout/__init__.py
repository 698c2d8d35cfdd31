"""rollout: train language-model agents with asynchronous RL."""
