from metis_lite.http.run import main

raise SystemExit(main())
