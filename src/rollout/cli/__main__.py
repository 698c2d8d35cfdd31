"""`python -m rollout.cli`: how the supervisor starts role processes."""

from rollout.cli import main

main()
