"""The language-model task (TOFU format): its metrics first (`metrics`), on per-example arrays."""
