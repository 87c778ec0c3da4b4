"""The two independent float64 references: ``loop`` (one sample at a time) and ``jax`` (padded batch)."""
