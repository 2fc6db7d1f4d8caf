"""End-to-end tests: the real broker as a twistd subprocess, driven by real clients."""
