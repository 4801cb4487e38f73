"""`python -m metis_lite.models.server`: the model server's entry point, kept for the scripts and
tests that start it this way; it is `metis-lite models serve`. The routes are
metis_lite/http/model_routes.py, the server metis_lite/http/server.py."""

from metis_lite.http.run import models_main as main

if __name__ == "__main__":
    raise SystemExit(main())
