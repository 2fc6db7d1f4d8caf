"""
A sans-IO AMQP 1.0 engine (OASIS AMQP 1.0), shared by the broker and the client library.

No networking code at all: bytes in, events out, bytes out (docs/design.md). See
L{mqgate.amqp.connection} for the theory of operation.
"""
