"""Rules as code."""
