"""Twisted adapters: the only code that touches transports."""
