"""Claude Code (the real CLI, pinned in tools/agents) as the agent of an episode."""
