"""Training health: RL failure modes found in what verl logs, online and offline."""
