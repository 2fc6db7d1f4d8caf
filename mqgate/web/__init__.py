"""
HTTP services: a twisted.web site on a connection service (L{mqgate.web.site}), and the
JSON admin API on it (L{mqgate.web.admin}).
"""
