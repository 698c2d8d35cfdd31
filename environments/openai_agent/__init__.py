"""An agent program as an episode: an unmodified `openai` SDK tool-calling loop."""
