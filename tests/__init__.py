"""The mqgate test suite.

This file makes ``tests`` a package on purpose. Without it, pytest's default
("prepend") import mode puts ``tests/`` itself on ``sys.path`` and imports
``tests/stomp/`` as a top-level package named ``stomp``, which shadows the
stomp.py client library the end-to-end tests use (likewise ``config``, ``core``
...). With it, the repository root goes on ``sys.path`` instead and test
modules are named ``tests.stomp.test_frames`` and so on.
"""
