from tpuops.cli.main import main

raise SystemExit(main())
