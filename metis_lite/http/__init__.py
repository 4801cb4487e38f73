"""The HTTP edge: one server (server.py) under the index service and the model server.

    wire.py            a request's head parsed, frozen Request and Response, the HTTP limits
    server.py          the server: connections on an event loop, whole requests to workers
    messages.py        the index service's requests, one typed body each (msgspec)
    service_routes.py  the index service's routes over service.Service, and the console
    static.py          the console's files
    model_routes.py    the model server's routes: TEI, OpenAI, Ollama, Cohere/Jina
    run.py             `metis-lite serve` and `metis-lite models serve`: flags, bind, serve

Nothing below this package imports it. The standard library's `http` is unaffected: inside
metis_lite this package is `metis_lite.http`.

Its face: run.
"""
