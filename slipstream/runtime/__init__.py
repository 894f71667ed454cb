"""The embedded runtime: planning, tasks, channels, scheduling, state."""
