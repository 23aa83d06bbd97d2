"""From spans to per-step figures: where a step went, the long tail, idle lanes."""
