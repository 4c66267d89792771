"""smg-trio: a trio streaming gateway between OpenAI-style clients and LLM engines."""

__version__ = "0.1.0"
