"""processing."""
