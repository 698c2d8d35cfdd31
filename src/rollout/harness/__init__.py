"""How environments are written for the platform.

- `Task`: one agent seat's side of an episode. `start` gives the first observation, `respond`
  answers each model reply with the next observation or an `End`.
- `Observation`: messages to add to the conversation (a string is one user message), and the
  tools the model may call from now on.
- `End`: the seat's reward (a number or a rolloutlib `Score`) and metrics.
- `RunContext`: who and where this seat is: run, episode, agent, seed, logger, the gateway's
  address and the seat's key, and the sandbox the episode claimed.
- `Environment`: a named, versioned Task with where its parameters come from, how many agents
  play one episode and how many episodes form a group.
"""

from rollout.harness.core import End, Environment, Observation, RunContext, Task

__all__ = ["End", "Environment", "Observation", "RunContext", "Task"]
