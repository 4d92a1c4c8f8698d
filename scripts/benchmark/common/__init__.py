"""Helpers every stage may use (markdown tables): the bottom of the pipeline beside the spec and the contracts."""
