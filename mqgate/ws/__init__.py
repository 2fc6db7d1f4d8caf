"""
WebSocket (S10.3): the server side on the gateway services (L{mqgate.ws.server}), its
rules for origins and subprotocols (L{mqgate.ws.policy}), STOMP frames as messages
(L{mqgate.ws.framing}) and a client endpoint for mqgate's own clients
(L{mqgate.ws.client}).
"""
