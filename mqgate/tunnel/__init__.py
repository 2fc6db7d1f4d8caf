"""The HTTP tunnel's sans-IO parts (S10.3): packet framing and one connection's
reliable-stream state. The Twisted sides are L{mqgate.net.tunnel} (the server's web
resources) and L{mqgate.net.tunnel_client} (the client endpoint)."""
