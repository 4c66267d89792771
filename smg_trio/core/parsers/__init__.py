"""Pure. Tool-call and reasoning parsers per model family (docs/tools-and-reasoning.md)."""
