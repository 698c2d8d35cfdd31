"""Two coding agents in one shared computer: one writes a function, the other its tests."""
