from perfsuite.kernel_report import main

raise SystemExit(main())
