# The VM's own credentials from its metadata server: the default service account's access token, kept until a
# minute before it expires. GCE_METADATA_HOST names another server, as Google's own libraries read it (the tests'
# fake on loopback).
#
# A part of the programs that act as the VM (the output shipper, the guard's bundle fetcher, the autostop agent):
# shipped.program() puts this file's text in place of their import of it, so it stays standard-library only,
# Python 3.8 syntax, with no `from __future__` import, and its names must not clash with theirs.

import json
import os
import time
from urllib.request import Request, urlopen

METADATA_DEFAULT_HOST = "metadata.google.internal"
METADATA_TIMEOUT = 30.0


class MetadataToken:
    """`get()`: the token, asked for again a minute before it expires. Raises what urlopen raises (URLError,
    HTTPError: OSErrors), ValueError for an answer that is not JSON, KeyError for one without a token."""

    def __init__(self, host=None):
        self.host = host or os.environ.get("GCE_METADATA_HOST") or METADATA_DEFAULT_HOST
        self.token = None
        self.expires = 0.0

    def url(self, item):
        return f"http://{self.host}/computeMetadata/v1/instance/service-accounts/default/{item}"

    def get(self):
        if self.token is None or time.time() >= self.expires:
            request = Request(self.url("token"), headers={"Metadata-Flavor": "Google"})
            with urlopen(request, timeout=METADATA_TIMEOUT) as answer:
                token = json.loads(answer.read().decode())
            self.token = token["access_token"]
            self.expires = time.time() + max(0.0, float(token.get("expires_in", 300)) - 60)
        return self.token
