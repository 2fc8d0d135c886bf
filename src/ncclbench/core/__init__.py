"""Core layer, the bottom: the types, errors, data rules and whole-file writes every layer above uses."""
