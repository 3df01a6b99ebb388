from crashwatch.cli import main

raise SystemExit(main())
