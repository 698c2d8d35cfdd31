"""Parity: is a 3-8 digit number even or odd? A task a tiny model learns on a CPU in seconds."""
