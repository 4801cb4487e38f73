from metis_lite.cli import main

raise SystemExit(main())
