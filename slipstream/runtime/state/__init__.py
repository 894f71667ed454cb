"""State backends: where keyed state lives while a job runs."""
