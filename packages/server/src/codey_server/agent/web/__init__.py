"""The web tools' I/O: ``web_fetch`` (:mod:`.fetch`, under the address rules of
:mod:`.addresses`) and ``web_search`` (:mod:`.search`). They run on the server, never on a
worker, whose sandbox keeps the network off; the turn asks for them with the ``WebCall``
effect and gets ``WebDone`` back (:mod:`codey_server.agent.machine`).

Errors: :class:`~.addresses.WebError` is the root; :class:`~.addresses.Refused` (a rule said
no: the scheme, the address, too many redirects) and :class:`~.addresses.FetchFailed` (the
remote did not answer as it should) are its two kinds. Each message is written for the model.
"""

from codey_server.agent.web.addresses import FetchFailed, Refused, WebError

__all__ = ["FetchFailed", "Refused", "WebError"]
