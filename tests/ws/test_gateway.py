"""The gateway services' root resource (S10.3): carriers at their paths, a JSON 404
elsewhere."""

import json

import pytest
from twisted.web.resource import Resource
from twisted.web.test.requesthelper import DummyRequest

from mqgate.web.gateway import gateway_root


class Leaf(Resource):
    isLeaf = True

    def render(self, request):
        return b"leaf"


def resolve(root, path):
    """The resource twisted.web would render for C{path}."""
    request = DummyRequest(path.strip("/").split("/"))
    resource = root
    while request.postpath and not getattr(resource, "isLeaf", False):
        segment = request.postpath.pop(0).encode()
        request.prepath.append(segment)
        resource = resource.getChildWithDefault(segment, request)
    return resource, request


def test_carriers_at_paths_of_one_or_more_segments():
    """A carrier is found at its path, also one of several segments (imqhttp/tunnel)."""
    ws, tunnel, old = Leaf(), Leaf(), Leaf()
    root = gateway_root({"ws": ws, "tunnel": tunnel, "/imqhttp/tunnel": old})
    assert resolve(root, "/ws")[0] is ws
    assert resolve(root, "/tunnel")[0] is tunnel
    assert resolve(root, "/imqhttp/tunnel")[0] is old


def test_other_paths_get_a_json_404():
    """A path no carrier serves is answered 404 with the services' JSON error body."""
    root = gateway_root({"ws": Leaf()})
    resource, request = resolve(root, "/nothing/here")
    body = resource.render(request)
    assert request.responseCode == 404
    assert json.loads(body)["status"] == 404


def test_two_carriers_cannot_share_a_path():
    """A second carrier at a taken path is a ValueError, not a silent replacement."""
    root = gateway_root({"ws": Leaf()})
    from mqgate.web.gateway import put_child
    with pytest.raises(ValueError):
        put_child(root, "/ws/", Leaf())
    with pytest.raises(ValueError):
        put_child(root, "/", Leaf())
