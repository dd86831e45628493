"""Control a running Triton server: `tritonize models list|load|unload|reload` (model repository API)."""
