"""Arithmetic example environment."""
