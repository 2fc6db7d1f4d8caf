"""Glue between protocol engine events and broker core calls (no I/O)."""
