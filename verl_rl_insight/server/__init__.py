"""The rl-insight server: metric hub and HTTP API on :18080, and the services it runs."""
